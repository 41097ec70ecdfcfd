"""Configuration loading and table definition parsing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siltlake.config import load_config
from siltlake.defbase import parse_duration
from siltlake.errors import ConfigError, DefinitionError
from siltlake.stream.discover import is_in_flight, map_key
from siltlake.streamconfig import DEFAULT_KEY_PATTERN
from siltlake.tabledef import TableDef, load_table_file

from .conftest import ACCESS_TABLE

ISSUE_EXAMPLE = """
schema = "web"
name = "access"
time_column = "utc_event_time"
timezone = "Asia/Tokyo"
merge_interval = "12h"
[[columns]]
name = "utc_event_time"
type = "timestamp"
[[columns]]
name = "user_id"
type = "bigint"
[[columns]]
name = "action"
type = "string"
"""


def test_embedded_defaults_without_any_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(environ={})
    assert config.catalog.url == "sqlite:///.siltlake/catalog.db"
    assert config.storage.root == ".siltlake/lake"
    assert config.storage.staging_root == ".siltlake/staging"
    assert config.spark.master == "local[*]"
    assert config.source == "embedded defaults"


def test_file_then_environment_overrides(tmp_path: Path) -> None:
    file = tmp_path / "siltlake.toml"
    file.write_text('[catalog]\nurl = "postgresql://postgres@db/silt"\n[stream]\npoll_interval = "1m"\n')
    config = load_config(
        file, environ={"SILTLAKE_STORAGE__ROOT": "s3://bucket/lake", "SILTLAKE_STREAM__POLL_INTERVAL": "5"}
    )
    assert config.catalog.url == "postgresql://postgres@db/silt"
    assert config.storage.root == "s3://bucket/lake"
    assert config.stream.poll_interval == 5
    assert config.source.endswith("+ environment")


@pytest.mark.parametrize(
    "content, message",
    [
        ('[catalog]\nurl = "mysql://x"\n', "catalog.url"),
        ('[stream]\npoll_interval = "soon"\n', "poll_interval"),
        ('[storage]\nroots = "x"\n', "storage.roots: unknown key"),
        ('[stream]\nkey_pattern = "(?P<schema>x)"\n', "named groups"),
        ('instance_key = "ABC"\n', "instance_key"),
        ("[catalog\n", "not valid TOML"),
        ("[merge]\nslots = 0\n", "merge.slots"),
        ('[merge]\njob_timeout = "20s"\nheartbeat_interval = "15s"\n', "at most half of merge.job_timeout"),
        ('[derived]\nbuild_timeout = "20s"\nheartbeat_interval = "15s"\n', "at most half of derived.build_timeout"),
        ('[derived]\nheartbeat_interval = "1h"\n', "derived.heartbeat_interval (3600 s) must be at most half"),
        ('[merge]\nretry_backoff = "later"\n', "merge.retry_backoff"),
    ],
)
def test_invalid_configuration_names_the_key(tmp_path: Path, content: str, message: str) -> None:
    file = tmp_path / "siltlake.toml"
    file.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(file, environ={})


def test_missing_explicit_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})


def test_issue_example_table_file(tmp_path: Path) -> None:
    file = tmp_path / "access.toml"
    file.write_text(ISSUE_EXAMPLE)
    table = load_table_file(file)
    assert table.qualified_name == "web.access"
    assert table.merge_interval == 43200
    assert table.zone.key == "Asia/Tokyo"
    assert str(table.arrow_schema().field("utc_event_time").type) == "timestamp[us, tz=UTC]"


def test_yaml_table_file(tmp_path: Path) -> None:
    import yaml

    file = tmp_path / "access.yaml"
    file.write_text(yaml.safe_dump(ACCESS_TABLE))
    assert load_table_file(file).qualified_name == "web.access"


@pytest.mark.parametrize("value, seconds", [("12h", 43200), ("0s", 0), ("30m", 1800), (45, 45), ("2d", 172800)])
def test_durations(value, seconds) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    "change, message",
    [
        ({"schema": "../etc"}, "schema name"),
        ({"name": "acc ess"}, "table name"),
        ({"name": "x;drop table tables"}, "table name"),
        ({"timezone": "Mars/Olympus"}, "IANA"),
        ({"merge_interval": "forever"}, "merge_interval"),
        ({"time_column": "nope"}, "not one of the columns"),
        ({"time_column": "user_id"}, "must have type timestamp"),
        (
            {"columns": [{"name": "utc_event_time", "type": "timestamp"}, {"name": "x", "type": "varchar"}]},
            "unknown column type",
        ),
        ({"columns": [{"name": "utc_event_time", "type": "timestamp"}, {"name": "dt", "type": "date"}]}, "reserved"),
        ({"color": "blue"}, "color: unknown key"),
        ({"merge_mode": "medium"}, "merge_mode"),
        ({"merge_batch_size": 0}, "merge_batch_size must be at least 1"),
        ({"row_group_bytes": -5}, "row_group_bytes must be at least 1"),
        (
            {"columns": [{"name": "utc_event_time", "type": "timestamp"}, {"name": "p", "type": "decimal(40,2)"}]},
            "precision",
        ),
    ],
)
def test_invalid_definitions_say_what_is_wrong(change, message) -> None:
    with pytest.raises(DefinitionError, match=re.escape(message)):
        TableDef.from_mapping({**ACCESS_TABLE, **change})


def test_decimal_and_every_type_map_to_arrow() -> None:
    columns = [{"name": "utc_event_time", "type": "timestamp"}] + [
        {"name": f"c_{i}", "type": t}
        for i, t in enumerate(["string", "int", "bigint", "double", "boolean", "date", "decimal(12, 3)", "json"])
    ]
    table = TableDef.from_mapping({**ACCESS_TABLE, "columns": columns})
    types = [str(f.type) for f in table.arrow_schema()]
    assert types == [
        "timestamp[us, tz=UTC]",
        "string",
        "int32",
        "int64",
        "double",
        "bool",
        "date32[day]",
        "decimal128(12, 3)",
        "string",
    ]


def test_staging_key_mapping() -> None:
    pattern = re.compile(DEFAULT_KEY_PATTERN)
    tables = {("web", "access"): "TABLE"}
    assert map_key("a1b2.web.access/2026/11/20/host-1.jsonl.gz", pattern, tables).table == "TABLE"
    assert map_key("web.access/2026/11/20/x", pattern, tables).table == "TABLE"
    assert "no table web.nosuch" in map_key("f.web.nosuch/2026/11/20/x", pattern, tables).reason
    assert "does not match" in map_key("random/file.json", pattern, tables).reason
    for unsafe in (
        "../../etc.web.access/2026/11/20/x",
        "a/../web.access/2026/11/20/x",
        "/abs.web.access/2026/11/20/x",
        "a.web.access/2026/11/20/\x00x",
    ):
        assert "unsafe key" in map_key(unsafe, pattern, tables).reason
    assert "not a valid table name" in map_key("f.Web.access/2026/11/20/x", pattern, tables).reason
    assert is_in_flight("a.web.access/2026/11/20/.x.gz") and is_in_flight("a/x.gz.tmp")
    assert not is_in_flight("a.web.access/2026/11/20/x.gz")


def test_storage_uris_for_pyarrow_and_for_spark(tmp_path: Path) -> None:
    from siltlake.storage.filesystem import Storage

    local = Storage(str(tmp_path / "lake"))
    assert local.uri("a/b.parquet") == (tmp_path / "lake" / "a" / "b.parquet").as_uri()
    assert local.engine_uri("a/b.parquet") == local.uri("a/b.parquet")
    # S3 roots go through the same class; only the engine URI changes scheme (no network needed).
    s3 = Storage.__new__(Storage)
    s3.root = "s3://bucket/lake"
    assert s3.uri("k/x.parquet") == "s3://bucket/lake/k/x.parquet"
    assert s3.engine_uri("k/x.parquet") == "s3a://bucket/lake/k/x.parquet"


@settings(max_examples=300, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from([*"aZ09_.~-/!$&'()*+,;=:@ %#?[]\"<>^`{|}", "\u00e9", "\u65e5", "\x7f"]),
        min_size=1,
        max_size=12,
    )
)
def test_a_uri_quotes_exactly_what_quote_would(key: str) -> None:
    """Storage.uri skips quote() for keys it would leave as they are: the URIs stored in the catalog stay the same."""
    from urllib.parse import quote

    from siltlake.storage.filesystem import URI_SAFE, Storage

    storage = Storage.__new__(Storage)
    storage.root = "file:///lake/staging"
    assert storage.uri(key) == f"file:///lake/staging/{quote(key, safe=URI_SAFE)}"


def test_field_ids_are_numbered_once_kept_and_never_reused() -> None:
    from siltlake.coltypes import FIELD_ID_KEY
    from siltlake.errors import DefinitionError
    from siltlake.tabledef import Column, TableDef

    base = {
        "schema": "web",
        "name": "ids",
        "time_column": "t",
        "columns": [{"name": "t", "type": "timestamp"}, {"name": "a", "type": "int"}],
    }
    legacy = TableDef.from_mapping(base)
    assert legacy.field_ids is None and "field_id" not in legacy.to_json(), "a definition without ids reads as before"
    numbered = legacy.with_field_ids()
    assert numbered.field_ids == {"t": 1, "a": 2, "dt": 3}
    assert TableDef.from_json(numbered.to_json()) == numbered
    assert numbered.with_field_ids({"t": 9, "a": 8, "dt": 7}) is numbered, "ids once given are kept"
    added = numbered.with_column(Column(name="b", type="string")).with_column_type("a", "bigint")
    assert added.field_ids == {"t": 1, "a": 2, "dt": 3, "b": 4}
    assert [(f.name, f.metadata[FIELD_ID_KEY]) for f in added.file_schema()] == [
        ("t", b"1"),
        ("a", b"2"),
        ("b", b"4"),
        ("dt", b"3"),
    ]
    assert legacy.with_column(Column(name="b", type="string")).field_ids is None
    assert legacy.with_field_ids({"t": 1, "a": 2, "dt": 4}).field_ids == {"t": 1, "a": 2, "dt": 4}
    with pytest.raises(DefinitionError, match="no field id for a"):
        legacy.with_field_ids({"t": 1, "dt": 2})
    with pytest.raises(DefinitionError, match="a, dt have none"):
        TableDef.from_mapping(
            {**base, "columns": [{"name": "t", "type": "timestamp", "field_id": 1}, {"name": "a", "type": "int"}]}
        )
    with pytest.raises(DefinitionError, match=r"field ids \[1\] are given twice"):
        TableDef.from_mapping(
            {
                **base,
                "dt_field_id": 1,
                "columns": [
                    {"name": "t", "type": "timestamp", "field_id": 1},
                    {"name": "a", "type": "int", "field_id": 2},
                ],
            }
        )

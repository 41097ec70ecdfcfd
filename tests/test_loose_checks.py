"""Values that only look right: a table file's non-boolean `nullable` (or non-integer sizes and TTL), and
a staging key whose YYYY/MM/DD is no calendar date. Each is refused, naming the file and field or the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.errors import DefinitionError
from siltlake.stream import stream_once
from siltlake.stream.discover import map_key
from siltlake.streamconfig import DEFAULT_KEY_PATTERN
from siltlake.tabledef import TableDef, load_table_file

from .conftest import ACCESS_TABLE, make_config
from .test_config_and_tabledef import ISSUE_EXAMPLE

USER_ID_LINE = 'name = "user_id"\ntype = "bigint"\n'


@pytest.mark.parametrize("value", ['"no"', '"false"', '"yes"', "0", "1", '"off"'])
def test_a_non_boolean_nullable_in_a_table_file_is_refused_naming_the_file_and_field(
    tmp_path: Path, value: str
) -> None:
    assert USER_ID_LINE in ISSUE_EXAMPLE
    path = tmp_path / "access.toml"
    path.write_text(ISSUE_EXAMPLE.replace(USER_ID_LINE, f"{USER_ID_LINE}nullable = {value}\n"))
    with pytest.raises(DefinitionError) as refused:
        load_table_file(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: columns.1.nullable: nullable ")
    assert "is not a boolean: write true or false" in message and "\n" not in message


def test_real_booleans_still_work_in_toml_and_yaml(tmp_path: Path) -> None:
    path = tmp_path / "access.toml"
    path.write_text(ISSUE_EXAMPLE.replace(USER_ID_LINE, f"{USER_ID_LINE}nullable = false\n"))
    assert load_table_file(path).column("user_id").nullable is False
    yaml_path = tmp_path / "access.yaml"
    yaml_path.write_text(
        "schema: web\nname: access\ntime_column: t\ncolumns:\n"
        "  - {name: t, type: timestamp}\n  - {name: v, type: int, nullable: false}\n"
    )
    assert load_table_file(yaml_path).column("v").nullable is False
    assert TableDef.from_json(load_table_file(path).to_json()).column("user_id").nullable is False


@pytest.mark.parametrize(
    "field, value",
    [("ttl_days", True), ("merged_object_size", "1000000"), ("merge_batch_size", 2.0), ("row_group_bytes", False)],
)
def test_sizes_and_the_ttl_must_be_whole_numbers(field: str, value: object) -> None:
    # ttl_days = true would otherwise be a one-day TTL: reap would delete every partition older than a day.
    with pytest.raises(
        DefinitionError, match=f"^t.toml: {field}: {field} {re.escape(repr(value))} is not a whole number$"
    ):
        TableDef.from_mapping({**ACCESS_TABLE, field: value}, source="t.toml")
    assert TableDef.from_mapping({**ACCESS_TABLE, field: 3}).model_dump()[field] == 3


@pytest.mark.parametrize("date", ["2026/13/45", "2026/02/30", "2026/00/10", "2026/11/31", "0000/01/01"])
def test_a_staging_key_with_an_impossible_date_maps_to_no_table_naming_the_key(date: str) -> None:
    key = f"f1.web.access/{date}/host-1.jsonl.gz"
    mapping = map_key(key, re.compile(DEFAULT_KEY_PATTERN), {("web", "access"): "TABLE"})
    assert mapping.table is None
    assert mapping.reason.startswith(f"key {key!r} has the impossible date {date}")
    assert (
        map_key(
            "f1.web.access/2028/02/29/host-1.jsonl.gz", re.compile(DEFAULT_KEY_PATTERN), {("web", "access"): "TABLE"}
        ).table
        == "TABLE"
    ), "a leap day is a date"


def test_a_pattern_without_date_groups_carries_no_date() -> None:
    pattern = re.compile(r"^(?P<schema>[a-z]+)\.(?P<table>[a-z]+)/(?P<name>.+)$")
    assert map_key("web.access/2026/13/45/x", pattern, {("web", "access"): "TABLE"}).table == "TABLE"


def test_the_stream_records_impossible_dates_as_unknown_objects_and_goes_on(tmp_path: Path, catalog_url: str) -> None:
    deployment = Deployment(make_config(tmp_path, catalog_url))
    try:
        deployment.init()
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        keys = {}
        for date in ("2026/13/45", "2026/02/30"):
            key = f"f1.web.access/{date}/a.jsonl"
            path = Path(deployment.staging.path(key))
            path.parent.mkdir(parents=True)
            path.write_bytes(b'{"time": "2026-11-20T01:00:00Z", "user_id": 1, "action": "v"}\n')
            keys[deployment.staging.uri(key)] = (key, date)
        report = stream_once(deployment)  # nothing is pending, so no Spark either
        assert (report.listed, report.registered, report.processed) == (2, 0, 0)
        unknown = {u.uri: u.reason for u in deployment.catalog.staging.unknown()}
        assert set(unknown) == set(keys)
        for uri, (key, date) in keys.items():
            assert unknown[uri].startswith(f"key {key!r} has the impossible date {date}")
        assert deployment.catalog.staging.pending(10) == []
    finally:
        deployment.close()

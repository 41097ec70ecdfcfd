"""stream.key_pattern's named layouts, with keys built exactly as each shipper's documentation says it names
objects. No shipper can be installed here, so each key is formatted by hand from the documented defaults."""

from __future__ import annotations

import re
import tomllib
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from siltlake.config import load_config
from siltlake.stream.discover import map_key
from siltlake.streamconfig import DEFAULT_KEY_PATTERN, KEY_LAYOUTS, StreamConfig
from siltlake.tabledef import TableDef

WHEN = datetime(2024, 5, 1, 13, 4, 5, tzinfo=UTC)
TABLES = {("web", "access"): "TABLE"}


def mapped(layout: str, key: str) -> str | None:
    """The table the key maps to under the layout, or the reason it maps to none."""
    mapping = map_key(key, re.compile(StreamConfig(key_pattern=layout).key_pattern), TABLES)  # type: ignore[arg-type]
    return mapping.table if mapping.table is not None else mapping.reason


def fluentd_out_s3_key(path: str, time_slice_format: str = "%Y%m%d%H", index: int = 0, extension: str = "gz") -> str:
    """s3_object_key_format's default, %{path}%{time_slice}_%{index}.%{file_extension} (store_as gzip: gz)."""
    return f"{path}{WHEN.strftime(time_slice_format)}_{index}.{extension}"


def fluentbit_s3_key(s3_key_format: str, tag: str, suffix: str = "-objectAbC12xYz") -> str:
    """$TAG, $TAG[n] (tag parts split at s3_key_format_tag_delimiters, default '.') and strftime in UTC; the key
    is the format after its leading '/'; without $UUID or $INDEX, Fluent Bit appends -object<8 random>."""
    key = s3_key_format
    for index, part in enumerate(tag.split(".")):
        key = key.replace(f"$TAG[{index}]", part)
    key = WHEN.strftime(key.replace("$TAG", tag).replace("$UUID", str(uuid.UUID(int=7))).replace("$INDEX", "0"))
    if "$UUID" not in s3_key_format and "$INDEX" not in s3_key_format:
        key += suffix
    return key.lstrip("/")


def vector_aws_s3_key(key_prefix: str, extension: str = "log.gz") -> str:
    """key_prefix (strftime), then filename_time_format (default %s), '-' and a UUID (filename_append_uuid,
    default true), '.' and the extension (gzip, the default compression: log.gz)."""
    return f"{WHEN.strftime(key_prefix)}{int(WHEN.timestamp())}-{uuid.UUID(int=9)}.{extension}"


@pytest.mark.parametrize(
    "key",
    [
        fluentd_out_s3_key("logs/web.access/"),
        fluentd_out_s3_key("web.access/"),
        fluentd_out_s3_key("logs/web.access/", "%Y%m%d", index=3),
        fluentd_out_s3_key("logs/web.access/", "%Y%m%d-%H", extension="txt"),
        fluentd_out_s3_key("fluentd.web.access/", extension="json"),
    ],
)
def test_fluentd_out_s3(key: str) -> None:
    assert mapped("fluentd_out_s3", key) == "TABLE", key


@pytest.mark.parametrize(
    "key",
    [
        fluentbit_s3_key("/fluent-bit-logs/$TAG/%Y/%m/%d/%H/%M/%S", "web.access"),  # the default format
        fluentbit_s3_key("/logs/$TAG[1].$TAG[2]/%Y/%m/%d/%H/%M/%S/$UUID.gz", "app.web.access"),
        fluentbit_s3_key("/$TAG/%Y/%m/%d/%H_%M_%S-$INDEX.log", "web.access"),
    ],
)
def test_fluentbit_s3(key: str) -> None:
    assert mapped("fluentbit_s3", key) == "TABLE", key


@pytest.mark.parametrize(
    "key",
    [
        vector_aws_s3_key("web.access/date=%F/"),
        vector_aws_s3_key("archive/web.access/date=%F/", extension="log"),
        vector_aws_s3_key("web.access/date=%F"),  # a key_prefix without its trailing '/'
    ],
)
def test_vector_aws_s3(key: str) -> None:
    assert mapped("vector_aws_s3", key) == "TABLE", key


def test_vector_aws_s3_needs_the_table_before_the_date() -> None:
    reason = mapped("vector_aws_s3", vector_aws_s3_key("date=%F/"))  # the default key_prefix alone
    assert reason is not None and "does not match" in reason and "<schema>.<table>/date=YYYY-MM-DD/" in reason


@pytest.mark.parametrize(
    "key",
    [
        WHEN.strftime("web.access/%Y/%m/%d/%H/host-1.jsonl.gz"),
        WHEN.strftime("prefix/x.web.access/%Y/%m/%d/%H/part-0001.log"),
    ],
)
def test_hourly(key: str) -> None:
    assert mapped("hourly", key) == "TABLE", key
    assert "does not match" in str(mapped("siltlake", key))  # the hour directory is no name


def test_layouts_refuse_impossible_dates_and_unknown_tables() -> None:
    assert "impossible date 2024/02/30" in str(mapped("hourly", "web.access/2024/02/30/01/x"))
    assert "impossible date 2024/13/01" in str(mapped("fluentd_out_s3", "web.access/2024130100_0.gz"))
    assert "impossible date 2024/02/31" in str(mapped("vector_aws_s3", "web.access/date=2024-02-31/1-x.log"))
    assert "no table web.other" in str(mapped("fluentbit_s3", "logs/web.other/2024/05/01/12/00/00-objectX"))


def test_a_layout_name_is_its_expression() -> None:
    assert StreamConfig(key_pattern="siltlake").key_pattern == DEFAULT_KEY_PATTERN
    for name, (regex, _shape) in KEY_LAYOUTS.items():
        assert StreamConfig(key_pattern=name).key_pattern == regex
        assert {"schema", "table"} <= set(re.compile(regex).groupindex)


def test_a_layout_is_named_in_the_config_file(tmp_path) -> None:
    (tmp_path / "siltlake.toml").write_text('[stream]\nkey_pattern = "fluentd_out_s3"\n')
    config = load_config(tmp_path / "siltlake.toml")
    assert config.stream.key_pattern == KEY_LAYOUTS["fluentd_out_s3"][0]


def _shippers_doc() -> str:
    return (Path(__file__).parent.parent / "docs" / "shippers.md").read_text()


def test_the_shippers_doc_configs_are_valid_and_map_their_example_keys() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", _shippers_doc(), re.S)
    layouts_seen = set()
    for block in blocks:
        data = tomllib.loads(block)
        if "stream" in data:
            config = StreamConfig(**data["stream"])
            # A named layout ("hourly") or a pattern of its own ('^...$'), then the example key it maps.
            example = re.search(r"""key_pattern = (?:"(\w+)"|'[^']+') +# (\S+)""", block)
            assert example is not None, block
            if example.group(1):
                layouts_seen.add(example.group(1))
            mapping = map_key(example.group(2), re.compile(config.key_pattern), TABLES)  # type: ignore[arg-type]
            assert mapping.table == "TABLE", (example.group(2), mapping.reason)
        elif "schema" in data:
            assert TableDef.from_mapping(data).naive_zone == "Asia/Tokyo"
    assert layouts_seen == {"siltlake", "fluentd_out_s3", "fluentbit_s3", "vector_aws_s3", "hourly"}

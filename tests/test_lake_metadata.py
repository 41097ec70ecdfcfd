"""Table.metadata, Table.partition_counts and Lake.list_tables: what `silt table show` and `silt table list` print,
from Python."""

from __future__ import annotations

import json

from siltlake.deployment import Deployment
from siltlake.lake import Lake

from .merge_helpers import silt_in_process
from .test_merge import make_table
from .test_table_tags import three_versions
from .test_upsert import KEYED


def test_table_show_prints_the_tables_metadata(plain_deployment: Deployment, monkeypatch) -> None:
    lake = three_versions(plain_deployment)
    silt = silt_in_process(plain_deployment, monkeypatch)
    silt("schema", "set", "web", "ttl_days=30")
    table = lake.table("web.access")
    meta = table.metadata
    shown = json.loads(silt("table", "show", "web.access", "--format", "json"))
    assert shown["table"] == meta.name and shown["physical"] == meta.physical_name
    assert shown["definition"]["kind"] == meta.kind == "log"
    assert shown["settings_from"] == dict(meta.settings_from) and meta.settings_from["ttl_days"] == "schema"
    assert [(c["name"], c["type"]) for c in shown["definition"]["columns"]] == [(c.name, c.type) for c in meta.columns]
    assert shown["partitions"] == table.partition_counts() and table.partition_counts()[0]["live_objects"] == 3
    text = silt("table", "show", "web.access")
    assert meta.physical_name in text and "ttl: 30 days (from schema)" in text
    assert all(column.source_field in text for column in meta.columns)


def test_table_list_prints_every_tables_metadata(plain_deployment: Deployment, monkeypatch) -> None:
    make_table(plain_deployment, "users", **KEYED)
    lake = Lake(plain_deployment)
    listed = json.loads(silt_in_process(plain_deployment, monkeypatch)("table", "list", "--format", "json"))
    tables = lake.list_tables()
    assert [row["table"] for row in listed] == [table.name for table in tables] and len(tables) == 2
    assert sorted(table.name for table in tables) == lake.tables()
    for row, table in zip(listed, tables, strict=True):
        meta = table.metadata
        assert (row["kind"], row["columns"]) == (meta.kind, len(meta.columns))
        assert row["created_at"] == meta.created_at.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")
        assert row["time_column"] == table.properties["time_column"]
    assert lake.table("web.users").metadata.keyed

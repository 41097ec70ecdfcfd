"""Settings inherited (docs/design.md "Settings inherited"): merge_mode, merged_object_size, ttl_days, codec and
merge_interval come from the table, else its schema (`silt schema set`), else the deployment's [tables] config,
else their defaults; `silt table show` says which; a change is a table version of each table it reaches."""

from __future__ import annotations

import json

import pytest

from siltlake.deployment import Deployment
from siltlake.errors import DefinitionError
from siltlake.merge import merge_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, only_partition


def create(deployment: Deployment, name: str, **settings: object):  # a TableRecord
    return deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": name, **settings}))


def test_a_schemas_setting_reaches_the_tables_that_do_not_set_it_each_a_table_version(
    plain_deployment: Deployment, monkeypatch
) -> None:
    silt = silt_in_process(plain_deployment, monkeypatch)
    tables = plain_deployment.catalog.tables
    create(plain_deployment, "own", codec="gzip", ttl_days=5)
    out = silt("schema", "set", "web", "codec=snappy", "ttl_days=30", "merge_mode=deep")
    assert "schema web: codec=snappy ttl_days=30 merge_mode=deep" in out
    assert "web.access (table version 1)" in out and "web.own (table version 1)" in out
    access, own = tables.get("web.access").definition, tables.get("web.own").definition
    assert (access.codec, access.ttl_days, access.merge_mode) == ("snappy", 30, "deep")
    assert (own.codec, own.ttl_days, own.merge_mode) == ("gzip", 5, "deep"), "the table's own values stay"
    assert [c.detail for c in tables.changes(tables.get("web.own").id)] == [
        "merge_mode=deep (inherited from schema web)"
    ]
    # A table created later inherits at once; schema other is untouched.
    assert tables.get("web.access").definition.merge_interval == 43200  # ACCESS_TABLE sets 12h itself
    later = create(plain_deployment, "later")
    assert (later.definition.codec, later.definition.ttl_days) == ("snappy", 30)
    assert create(plain_deployment, "elsewhere", schema="other").definition.codec == "zstd"

    shown = json.loads(silt("table", "show", "web.access", "--format", "json"))
    assert shown["settings_from"] == {
        "merge_mode": "schema",
        "merged_object_size": "default",
        "ttl_days": "schema",
        "codec": "schema",
        "merge_interval": "table",
    }
    assert "codec: snappy (from schema)" in silt("table", "show", "web.access")
    assert "nothing changed" in silt("schema", "set", "web", "codec=snappy")

    # The table takes a key for itself, then hands it back; `inherit` at the schema hands it to the default.
    silt("table", "set", "web.access", "codec=gzip")
    assert tables.setting_sources(tables.get("web.access"))["codec"] == "table"
    silt("schema", "set", "web", "codec=none")
    assert tables.get("web.access").definition.codec == "gzip"
    assert "codec=inherit (none)" in silt("table", "set", "web.access", "codec=inherit")
    assert tables.get("web.access").definition.codec == "none"
    silt("schema", "set", "web", "codec=inherit", "ttl_days=inherit")
    access = tables.get("web.access")
    assert (access.definition.codec, access.definition.ttl_days) == ("zstd", None)
    assert tables.setting_sources(access)["codec"] == "default"
    history = json.loads(silt("history", "web.access", "--format", "json"))
    assert [row["shows"] for row in history if row["op"] == "set"] == [
        "merge_mode=deep ttl_days=30 codec=snappy (inherited from schema web)",
        "codec=gzip",
        "codec=inherit (none)",
        "ttl_days=none codec=zstd (inherited from schema web)",
    ]

    # Moved to another schema, a table inherits that schema's values.
    silt("schema", "set", "other", "merge_mode=shallow")
    silt("table", "rename", "web.later", "other.later")
    assert tables.get("other.later").definition.merge_mode == "shallow"

    silt("schema", "set", "web", "row_group_bytes=1", code=2)
    silt("schema", "set", "web", "codec=lz4", code=2)
    with pytest.raises(DefinitionError, match="a schema sets only the settings its tables inherit"):
        tables.set_schema("web", ["error_policy=file"])
    assert tables.schema_settings("web") == {"merge_mode": "deep"}, "a refused set changes nothing"


def test_the_deployments_config_is_the_level_below_the_schema(plain_deployment: Deployment, tmp_path) -> None:
    from .conftest import make_config

    config = make_config(tmp_path, plain_deployment.config.catalog.url)
    config.tables.merged_object_size = "64MiB"
    config.tables.merge_mode = "shallow"
    deployment = Deployment(config)
    try:
        tables = deployment.catalog.tables
        tables.set_schema("web", ["merge_mode=deep"])
        deployment.init()  # applies the config to the tables that inherit from it
        record = tables.get("web.access")
        assert (record.definition.merged_object_size, record.definition.merge_mode) == (64 << 20, "deep")
        assert tables.setting_sources(record) == {
            "merge_mode": "schema",
            "merged_object_size": "deployment",
            "ttl_days": "default",
            "codec": "default",
            "merge_interval": "table",
        }
        assert create(deployment, "fresh", schema="logs").definition.merge_mode == "shallow"
        config.tables.merged_object_size = "1TB"
        with pytest.raises(DefinitionError, match=r"config \[tables\]: merged_object_size '1TB' is not a size"):
            Deployment(config)
    finally:
        deployment.close()


def test_merge_batch_size_changes_after_create_and_the_next_merge_follows(deployment: Deployment, monkeypatch) -> None:
    silt = silt_in_process(deployment, monkeypatch)
    table = create(deployment, "access", merge_interval=0)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, seed) for seed in range(3)])
    assert "merge_batch_size=2 (table version 1)" in silt("table", "set", "web.access", "merge_batch_size=2")
    merge_once(deployment)
    log = deployment.catalog.merge_queue.log(only_partition(deployment, table).id)
    assert [(entry["objects_in"], entry["outcome"]) for entry in log][:2] == [(2, "continuing"), (1, "finished")]
    silt("table", "set", "web.access", "merge_batch_size=0", code=2)

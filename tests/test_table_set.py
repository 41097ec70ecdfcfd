"""`silt table set`: table properties that change after `silt table create`, each change a table version, each
daemon following it from its next run."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from siltlake.catalog.table_changes import parse_assignments, with_properties
from siltlake.deployment import Deployment
from siltlake.errors import CatalogError, DefinitionError
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.reap import reap_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table, only_partition
from .test_publish import tokyo
from .test_reap import files


def test_values_are_read_per_key_and_refused_naming_the_key() -> None:
    definition = TableDef.from_mapping(ACCESS_TABLE)
    changed, detail = with_properties(
        definition,
        parse_assignments(
            [
                "ttl_days=30",
                "merge_mode=Deep",
                "merge_interval=2h",
                "merged_object_size=64MiB",
                "row_group_bytes=4096",
                "codec=snappy",
                "error_policy=file",
                "unknown_fields=reject",
            ]
        ),
    )
    assert (
        changed.ttl_days,
        changed.merge_mode,
        changed.merge_interval,
        changed.merged_object_size,
        changed.row_group_bytes,
        changed.codec,
        changed.error_policy,
        changed.unknown_fields,
    ) == (30, "deep", 7200, 64 << 20, 4096, "snappy", "file", "reject")
    assert detail == (
        "ttl_days=30 merge_mode=deep merge_interval=2h merged_object_size=67108864 "
        "row_group_bytes=4096 codec=snappy error_policy=file unknown_fields=reject"
    )
    assert changed.columns == definition.columns and changed.field_ids == definition.field_ids
    cleared, detail = with_properties(changed, {"ttl_days": "none", "codec": "snappy"})
    assert cleared.ttl_days is None and detail == "ttl_days=none", "an unchanged value is not a change"
    assert with_properties(cleared, {"codec": "snappy"}) == (cleared, "")

    refused = {
        "ttl_days=0": "ttl_days '0' is not a number of days",
        "ttl_days=ten": "ttl_days 'ten' is not a number",
        "merge_mode=fast": "merge_mode 'fast' is not one of auto, deep, shallow",
        "codec=lz4": "codec 'lz4' is not one of zstd, snappy, gzip, none",
        "error_policy=drop": "error_policy 'drop' is not one of skip, file",
        "unknown_fields=keep": "unknown_fields 'keep' is not one of ignore, reject",
        "merge_interval=soon": "merge_interval 'soon' is not a duration",
        "merged_object_size=0": "merged_object_size '0' is not a size",
        "row_group_bytes=1TB": "row_group_bytes '1TB' is not a size",
    }
    for pair, message in refused.items():
        with pytest.raises(DefinitionError, match=message):
            with_properties(definition, parse_assignments([pair]))
    for pairs, message in (
        (["timezone=UTC"], "'timezone' cannot be set: the keys are ttl_days, merge_mode"),
        (["ttl_days"], "'ttl_days' is not key=value"),
        ([], "give at least one key=value"),
        (["codec=zstd", "codec=gzip"], "codec is given twice"),
    ):
        with pytest.raises(DefinitionError, match=message):
            parse_assignments(pairs)


def test_each_change_is_a_table_version_in_history(plain_deployment: Deployment) -> None:
    tables = plain_deployment.catalog.tables
    record, change = tables.set_properties("web.access", ["ttl_days=7", "codec=gzip"])
    assert change is not None and (change.table_version, change.op, change.detail) == (
        1,
        "set",
        "ttl_days=7 codec=gzip",
    )
    assert (record.definition.ttl_days, record.definition.codec) == (7, "gzip")
    assert tables.set_properties("web.access", ["ttl_days=7"])[1] is None, "no change, no version"
    with pytest.raises(DefinitionError, match="codec 'lz4' is not one of"):
        tables.set_properties("web.access", ["ttl_days=9", "codec=lz4"])
    assert tables.get("web.access").definition.ttl_days == 7, "a refused set changes nothing"
    _, second = tables.set_properties("web.access", ["ttl_days=none"])
    assert second is not None and second.table_version == 2
    assert [(c.table_version, c.detail, c.definition.ttl_days) for c in tables.changes(record.id)] == [
        (1, "ttl_days=7 codec=gzip", 7),
        (2, "ttl_days=none", None),
    ]
    table = Lake(plain_deployment).table("web.access")
    assert table.version == 2 and table.versions() == (1, 2)
    assert [(row["table_version"], row["op"], row["shows"], row["date"]) for row in table.history()] == [
        (1, "set", "ttl_days=7 codec=gzip", None),
        (2, "set", "ttl_days=none", None),
    ]
    assert table.set_properties(merge_mode="shallow", ttl_days=None) == "merge_mode=shallow"
    with pytest.raises(CatalogError, match="no table web.nope"):
        tables.set_properties("web.nope", ["ttl_days=1"])


def test_silt_table_set_changes_ttl_and_merge_mode_and_the_next_reap_and_merge_follow(
    deployment: Deployment, monkeypatch
) -> None:
    silt = silt_in_process(deployment, monkeypatch)
    table = make_table(deployment, merge_mode="deep")
    later_day = DAY + dt.timedelta(days=3)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 300, seed) for seed in range(2)])
    merge_once(deployment)
    partition = only_partition(deployment, table)
    assert [entry["mode"] for entry in deployment.catalog.merge_queue.log(partition.id)] == ["deep"]

    add_small_objects(deployment, table, later_day, [rows_for(later_day, 20, 7)])
    publish_once(deployment, now=tokyo(later_day, 10))  # table version 1

    out = silt("table", "set", "web.access", "merge_mode=shallow", "ttl_days=2")
    assert "merge_mode=shallow ttl_days=2 (table version 2)" in out
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 300, 2)])
    merge_once(deployment)
    assert [entry["mode"] for entry in deployment.catalog.merge_queue.log(partition.id)] == ["deep", "shallow"]
    assert any(f"/dt={DAY}/" in key for key in files(deployment))
    reap_once(deployment, now=tokyo(later_day, 12))
    assert not any(f"/dt={DAY}/" in key for key in files(deployment)), "past the TTL set after create"
    assert any(f"/dt={later_day}/" in key for key in files(deployment))

    history = json.loads(silt("history", "web.access", "--format", "json"))
    assert [row for row in history if row["op"] == "set"] == [
        {
            "date": None,
            "version": None,
            "table_version": 2,
            "op": "set",
            "shows": "merge_mode=shallow ttl_days=2",
            "created_at": history[-1]["created_at"],
            "rows": None,
            "bytes": None,
        }
    ]
    silt("table", "set", "web.access", "codec=lz4", code=2)

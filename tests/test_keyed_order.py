"""Keyed tables order a key's rows by the time column by default (docs/design.md "Keyed tables", Order): an
at-least-once shipper that re-sends an old chunk under a new name never rolls a key back; the last committed row
wins only when asked for by name (sequence_column = "_commit_order")."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.errors import DefinitionError
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .test_merge import DAY
from .test_publish import tokyo

_staged = iter(range(1_000_000))


def items_table(name: str, **settings: object) -> TableDef:
    return TableDef.from_mapping(
        {
            "schema": "shop",
            "name": name,
            "time_column": "utc_event_time",
            "timezone": "Asia/Tokyo",
            "merge_interval": 0,
            "primary_key": ["cart_id"],
            **settings,
            "columns": [
                {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
                {"name": "cart_id", "type": "string", "nullable": False},
                {"name": "item", "type": "string"},
            ],
        }
    )


def ship(deployment: Deployment, table: str, lines: bytes) -> None:
    """Stage one chunk (a new name each time, as a shipper's retry writes) and stream it."""
    path = Path(deployment.staging.path(f"f1.shop.{table}/{DAY:%Y/%m/%d}/{next(_staged)}.jsonl.gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(lines))
    assert stream_once(deployment).bad_records == 0


def chunk(minute: int, item: str) -> bytes:
    time = (tokyo(DAY, 12) + dt.timedelta(minutes=minute)).isoformat() + "Z"
    return (json.dumps({"time": time, "cart_id": "c1", "item": item}) + "\n").encode()


def items(deployment: Deployment, table: str) -> list[str]:
    return Lake(deployment).table(f"shop.{table}").to_arrow().column("item").to_pylist()


@pytest.mark.parametrize(
    "catalog_url", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
def test_a_resent_older_chunk_does_not_roll_a_key_back_before_or_after_merge(deployment: Deployment) -> None:
    record = deployment.catalog.tables.create(items_table("carts"))
    assert record.definition.sequence_column == "utc_event_time", "the time column orders a key's rows"
    chunk_a, chunk_b = chunk(0, "item1"), chunk(5, "item2")
    for hour, lines in enumerate((chunk_a, chunk_b, chunk_a), start=13):  # A is re-sent under a new name after B
        ship(deployment, "carts", lines)
        publish_once(deployment, now=tokyo(DAY, hour))
    assert items(deployment, "carts") == ["item2"]
    assert merge_once(deployment).finished == 1
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 1))  # the day ends: closed
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 2))  # and switched to its merged object
    (partition,) = deployment.catalog.partitions.list(record.id)
    assert partition.state == "switched"
    assert items(deployment, "carts") == ["item2"], "the merge keeps the row with the latest event time"
    feed = Lake(deployment).table("shop.carts").changes(0).to_pylist()
    assert [(row["_change_type"], row["item"]) for row in feed] == [
        ("insert", "item1"),
        ("update_preimage", "item1"),
        ("update_postimage", "item2"),
    ], "the re-send and the merge change nothing readers see: no rollback pair"

    # Asked for by name, the last committed row wins: the re-sent chunk rolls the key back, as documented.
    committed = deployment.catalog.tables.create(items_table("committed", sequence_column="_commit_order"))
    assert committed.definition.sequence_column == ""
    for lines in (chunk_a, chunk_b, chunk_a):
        ship(deployment, "committed", lines)
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 3))
    assert items(deployment, "committed") == ["item1"]


def test_the_default_and_the_opt_out_in_definitions() -> None:
    assert items_table("t").sequence_column == "utc_event_time"
    assert items_table("t", sequence_column="_commit_order").sequence_column == ""
    stored = items_table("t", sequence_column="_commit_order").to_json()
    assert TableDef.from_json(stored).sequence_column == "", "stored, it stays last-committed-wins"
    renamed = items_table("t").model_dump(by_alias=True)
    assert TableDef.from_mapping(renamed).sequence_column == "utc_event_time"
    from siltlake.catalog.table_changes import with_column_renamed

    moved = with_column_renamed(items_table("t"), "utc_event_time", "event_time")
    assert (moved.time_column, moved.sequence_column) == ("event_time", "event_time")
    with pytest.raises(DefinitionError, match="sequence_column orders the rows of one key: it needs a primary_key"):
        TableDef.from_mapping({**items_table("t").model_dump(by_alias=True), "primary_key": []})

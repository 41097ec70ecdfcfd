"""The Iceberg target's field ids through a column dropped and another added before one publish: the Iceberg
schema keeps each column's id, the new column takes a new one (never the dropped column's), and every snapshot
reads its own rows and columns by id."""

from __future__ import annotations

import datetime as dt

import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_of_version
from siltlake.tabledef import Column

from .merge_helpers import add_small_objects
from .test_iceberg_target import STATUS_COLUMNS, published, rows, with_iceberg
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark  # the deployment fixture starts the test session's Spark


def test_a_column_dropped_and_another_added_before_a_publish_keep_every_field_id(deployment: Deployment) -> None:
    with_iceberg(deployment)
    record = make_table(deployment, columns=STATUS_COLUMNS)
    catalog = deployment.catalog
    add_small_objects(deployment, record, DAY, [rows(DAY, 10, 0)])
    published(deployment, tokyo(DAY, 12))
    before = {f.name: f.field_id for f in open_catalog(deployment).load_table(("web", "access")).schema().fields}

    # Both changes between two publishes: the drop frees no id for the added column to take.
    catalog.tables.drop_column("web.access", "status", now=tokyo(DAY, 12) + dt.timedelta(minutes=1))
    record = catalog.tables.add_column(
        "web.access",
        Column.from_mapping({"name": "referrer", "type": "string"}),
        now=tokyo(DAY, 12) + dt.timedelta(minutes=2),
    )
    add_small_objects(
        deployment,
        record,
        DAY,
        [[{k: v for k, v in row.items() if k != "status"} | {"referrer": "r"} for row in rows(DAY, 10, 1)]],
    )
    published(deployment, tokyo(DAY, 13))

    iceberg = open_catalog(deployment).load_table(("web", "access"))
    after = {f.name: f.field_id for f in iceberg.schema().fields}
    assert "status" not in after
    assert {name: after[name] for name in before if name != "status"} == {
        name: field_id for name, field_id in before.items() if name != "status"
    }, "kept columns keep their ids"
    assert after["referrer"] not in before.values(), "the added column takes a new id, not the dropped one's"

    table = Lake(deployment).table("web.access")
    newest = iceberg.scan().to_arrow()
    assert sorted(newest.column_names) == sorted(table.to_arrow().column_names)  # Iceberg keeps dt where it was
    assert sorted(newest.column("user_id").to_pylist()) == sorted(table.to_arrow().column("user_id").to_pylist())
    referrers = dict(zip(newest.column("user_id").to_pylist(), newest.column("referrer").to_pylist(), strict=True))
    assert {u for u, r in referrers.items() if r == "r"} == {row["user_id"] for row in rows(DAY, 10, 1)}
    assert all(r is None for u, r in referrers.items() if u not in {row["user_id"] for row in rows(DAY, 10, 1)}), (
        "rows written before the column was added read it as null, not the dropped column's values"
    )
    first = iceberg.scan(snapshot_id=snapshot_of_version(iceberg, 1).snapshot_id).to_arrow()
    assert "status" in first.column_names and "referrer" not in first.column_names
    assert sorted(first.column("status").to_pylist()) == sorted(row["status"] for row in rows(DAY, 10, 0))

"""Objects written before siltlake wrote dt and field ids into them keep reading through Iceberg readers.

The table's field ids come back from its Iceberg table (made by the older siltlake with fewer columns, so the
ids of later ones were Iceberg's choice); readers find the old objects' columns through the name mapping; a
merge rewrites the old objects with dt and the ids, and every reader then agrees with siltlake.
"""

from __future__ import annotations

import re

import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_files

from .merge_helpers import add_small_objects, rows_for
from .test_iceberg_readers import (
    IDENT,
    NEXT_DAY,
    assert_files_carry_the_schema_ids,
    assert_readers_agree,
    disagreements,
    published,
)
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark


def test_objects_written_before_field_ids_keep_reading_and_a_merge_rewrites_them(deployment: Deployment) -> None:
    """A table stored before field ids, its objects without dt or ids, and its Iceberg table made by that
    older siltlake (created with fewer columns: the ids of later ones were Iceberg's choice)."""
    from siltlake.tabledef import Column

    deployment.config.publish.targets = ["iceberg"]
    record = make_table(deployment)
    forget_field_ids(deployment, record.id)
    old = [
        add_small_objects(
            deployment, Lake(deployment).table("web.access").record, DAY, [rows_for(DAY, 10, 0)], legacy=True
        )
    ]
    published(deployment, tokyo(DAY, 12))
    forget_field_ids(deployment, record.id)  # as the older siltlake that made the Iceberg table left it
    record = deployment.catalog.tables.add_column(
        "web.access", Column(name="referrer", type="string"), now=tokyo(DAY, 12)
    )
    assert record.definition.field_ids is None
    rows = [{**row, "referrer": "r"} for row in rows_for(DAY, 10, 1)]
    old.append(add_small_objects(deployment, record, DAY, [rows], legacy=True))
    published(deployment, tokyo(DAY, 13))
    record = Lake(deployment).table("web.access").record
    schema = open_catalog(deployment).load_table(IDENT).schema()
    assert record.definition.field_ids == {"utc_event_time": 1, "user_id": 2, "action": 3, "dt": 4, "referrer": 5}
    assert {f.name: f.field_id for f in schema.fields} == record.definition.field_ids, (
        "the table took the ids its Iceberg table gave its columns"
    )

    add_small_objects(deployment, record, DAY, [[{**row, "referrer": "n"} for row in rows_for(DAY, 10, 2)]])
    add_small_objects(deployment, record, NEXT_DAY, [rows_for(NEXT_DAY, 10, 3)])
    version = published(deployment, tokyo(DAY, 14))
    layout = record.layout(deployment.instance_key)
    legacy = {deployment.lake.uri(layout.small_object(DAY, i, False)) for ids in old for i in ids}
    assert_files_carry_the_schema_ids(deployment, legacy)
    # Objects without dt: PyIceberg (0.12) evaluates a dt filter on a file that lacks dt as null unless dt is
    # selected too (it fills partition values into selected columns only); DataFusion through pyiceberg-core (0.10)
    # fills no partition value at all, so dt is null on them whether selected or filtered on. Every other answer,
    # the columns found through the name mapping included, is right.
    wrong = disagreements(deployment, [version - 1, version])
    by_dt = {
        "pyiceberg scan": ("dt filter, dt not selected", "dt and column"),
        "pyiceberg scan by snapshot time": ("dt filter, dt not selected", "dt and column"),
        "datafusion": ("every column", "dt filter, dt not selected", "other column", "dt and column", "added column"),
    }
    assert {re.match(r"version (\d+), (.+?): (.+?) returns", line).groups() for line in wrong} == {
        (str(at), shape, reader)
        for at in (version - 1, version)
        for reader, shapes in by_dt.items()
        for shape in shapes
    }, wrong

    merge_once(deployment)
    published(deployment, tokyo(NEXT_DAY, 1))
    version = published(deployment, tokyo(NEXT_DAY, 2))  # DAY switched to its merged object
    files = {
        f.file_path
        for f in snapshot_files(
            open_catalog(deployment).load_table(IDENT), open_catalog(deployment).load_table(IDENT).current_snapshot()
        )
    }
    assert not files & legacy, "the merge rewrote the old objects"
    assert_files_carry_the_schema_ids(deployment)
    assert_readers_agree(deployment, [version])


def forget_field_ids(deployment: Deployment, table_id: int) -> None:
    """Store the table's definition as a siltlake before field ids stored it."""
    from siltlake.catalog.core import table_record
    from siltlake.catalog.schema import tables
    from siltlake.tabledef import TableDef

    with deployment.catalog.tables._core.tx() as c:  # a state no public call makes any more
        record = table_record(c.execute(tables.select().where(tables.c.id == table_id)).one())
        data = record.definition.model_dump(by_alias=True)
        data["columns"] = [{k: v for k, v in column.items() if k != "field_id"} for column in data["columns"]]
        data.pop("dt_field_id", None)
        legacy = TableDef.from_mapping(data)
        assert legacy.field_ids is None
        c.execute(tables.update().where(tables.c.id == table_id).values(definition=legacy.to_json()))

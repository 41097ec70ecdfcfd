"""Schema-change versions reach Iceberg when they return, as every other write's (siltlake.publish.iceberg.follow).

Each change made through the table API (add, rename, drop and widen a column, set properties, several at once) and
`silt table alter-column` is a table version whose snapshot is committed right after the catalog commit, stamped with
the version's time and read with the version's columns; a process killed between the two commits leaves Iceberg on
the version before, and the next write brings both. A column dropped and another added keep Iceberg's field ids the
definition's, whether each change follows at once or a publish run commits both.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from siltlake.coltypes import PARTITION_COLUMN
from siltlake.deployment import Deployment
from siltlake.lake import Lake, Table
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import VERSION_TIME_PROPERTY, open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_of_version, synced_version
from siltlake.tabledef import Column

from .conftest import make_config
from .merge_helpers import silt_in_process
from .test_iceberg_follow import millis, snapshot_versions
from .test_iceberg_target import STATUS_COLUMNS
from .test_merge import make_table

IDENT = ("web", "access")
# The child: a deployment from the test's config that adds a column and is SIGKILLed after siltlake's catalog commit,
# before the Iceberg commit (the follow never begins).
CHILD = r"""
import json, os, signal, sys
from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish.iceberg import target as iceberg_target

deployment = Deployment(Config.model_validate(json.load(sys.stdin)))
iceberg_target.IcebergTarget.follow = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
Lake(deployment).table("web.access").add_column("referrer", "string")
print("not killed")
"""


@pytest.fixture
def published(tmp_path: Path, catalog_url: str) -> Deployment:
    """web.access (with a `status` int column) published to Iceberg, on the clock: version 1, six rows."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.config.publish.targets = ["iceberg"]
    deployment.init()
    make_table(deployment, columns=STATUS_COLUMNS)
    Lake(deployment).table("web.access").append(
        pa.table(
            {
                "utc_event_time": times(6, 0),
                "user_id": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
                "action": ["a", "b", "a", "b", "a", "b"],
                "status": pa.array([200, 404, 200, 500, 200, 404], pa.int32()),
            }
        )
    )
    report = publish_once(deployment)
    assert not report.target_errors, report.target_errors
    yield deployment
    deployment.close()


def times(count: int, start: int) -> list[dt.datetime]:
    """Event times of today's open partition (an older, closed one would delay rows until a merge)."""
    base = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=10)
    return [base + dt.timedelta(seconds=start + n) for n in range(count)]


def iceberg_table(deployment: Deployment):  # a pyiceberg Table
    return open_catalog(deployment).load_table(IDENT)


def rows(table: pa.Table) -> list[dict]:
    """A table's rows, columns by name (Iceberg keeps dt where it put it), ordered by user."""
    return sorted(table.to_pylist(), key=lambda row: row["user_id"])


def assert_every_version_is_its_snapshot(deployment: Deployment) -> None:
    """One snapshot per version, none missing; each stamped with its version's time (timestamp and summary) and
    holding that version's columns and rows."""
    table = Lake(deployment).table("web.access")
    first, newest = table.versions()
    assert snapshot_versions(deployment) == list(range(first, newest + 1)), "every version once, none missing"
    iceberg = iceberg_table(deployment)
    version_times = deployment.catalog.version_reads.version_times(table.record.id, first - 1, newest)
    for version in range(first, newest + 1):
        snapshot = snapshot_of_version(iceberg, version)
        assert snapshot.timestamp_ms == millis(version_times[version]), f"version {version}: its time"
        assert snapshot.summary[VERSION_TIME_PROPERTY] == version_times[version].isoformat() + "Z"
        theirs = iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        ours = table.to_arrow(as_of_version=version)
        assert set(theirs.column_names) == set(ours.column_names), f"version {version}: its columns"
        assert rows(theirs) == rows(ours.select(theirs.column_names)), f"version {version}: its rows"


def assert_followed(deployment: Deployment, table: Table) -> None:
    assert synced_version(iceberg_table(deployment)) == table.version, "in Iceberg when the change returns"


def test_each_schema_change_is_in_iceberg_when_it_returns(published: Deployment) -> None:
    table = Lake(published).table("web.access")
    table.add_column("referrer", "string")
    assert_followed(published, table)
    table.rename_column("action", "event")
    assert_followed(published, table)
    table.alter_column("status", "bigint")  # a widening: a version of its own, no rewrite
    assert_followed(published, table)
    assert table.set_properties(ttl_days=30) == "ttl_days=30"
    assert_followed(published, table)
    made = table.version
    assert table.set_properties(ttl_days=30) == "" and table.version == made, "no change, no version"
    assert snapshot_versions(published)[-1] == made, "and no snapshot"
    with table.alter() as change:  # several changes, one version, one snapshot
        change.drop_column("status")
        change.add_column("region", "string")
        change.set_properties(merge_mode="deep")
    assert_followed(published, table)
    table.append(
        pa.table(
            {
                "utc_event_time": times(2, 100),
                "user_id": pa.array([7, 8], pa.int64()),
                "event": ["c", "c"],
                "referrer": ["x", None],
                "region": ["eu", "us"],
            }
        )
    )
    assert not publish_once(published).target_errors
    assert table.version == 7
    assert_every_version_is_its_snapshot(published)
    schema = iceberg_table(published).schema()
    assert [f.name for f in schema.fields if f.name != PARTITION_COLUMN] == [
        c.name for c in table.record.definition.columns
    ]


def test_silt_table_alter_column_is_in_iceberg_when_it_returns(published: Deployment, monkeypatch) -> None:
    silt = silt_in_process(published, monkeypatch)
    monkeypatch.setenv("SILTLAKE_PUBLISH__TARGETS", "iceberg")
    assert "is now bigint (table version 2)" in silt("table", "alter-column", "web.access", "status", "bigint")
    assert synced_version(iceberg_table(published)) == 2
    assert str(iceberg_table(published).schema().find_field("status").field_type) == "long"
    assert_every_version_is_its_snapshot(published)


def test_silt_table_and_schema_commands_are_in_iceberg_when_they_return(published: Deployment, monkeypatch) -> None:
    silt = silt_in_process(published, monkeypatch)
    monkeypatch.setenv("SILTLAKE_PUBLISH__TARGETS", "iceberg")
    silt("table", "add-column", "web.access", "referrer", "string")
    assert synced_version(iceberg_table(published)) == 2
    silt("table", "rename-column", "web.access", "action", "event")
    assert synced_version(iceberg_table(published)) == 3
    silt("table", "drop-column", "web.access", "status", "--dry-run")
    assert synced_version(iceberg_table(published)) == 3, "a dry run makes no version and no snapshot"
    silt("table", "drop-column", "web.access", "status", "--yes")
    assert synced_version(iceberg_table(published)) == 4
    assert "table version 5" in silt("table", "set", "web.access", "ttl_days=30")
    assert synced_version(iceberg_table(published)) == 5
    assert "table version 6" in silt("schema", "set", "web", "codec=snappy")  # web.access inherits it
    assert synced_version(iceberg_table(published)) == 6
    names = [f.name for f in iceberg_table(published).schema().fields]
    assert "referrer" in names and "event" in names and "status" not in names and "action" not in names
    assert_every_version_is_its_snapshot(published)


def test_a_change_killed_between_siltlakes_commit_and_icebergs_is_followed_by_the_next(published: Deployment) -> None:
    before = Lake(published).table("web.access").version
    request = json.dumps(published.config.model_dump(mode="json", by_alias=True))
    done = subprocess.run(
        [sys.executable, "-c", CHILD], input=request, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr[-3000:])
    table = Lake(published).table("web.access")
    assert table.version == before + 1 and "referrer" in table.schema.names, "siltlake committed the change"
    iceberg = iceberg_table(published)
    assert synced_version(iceberg) == before, "Iceberg shows the version before, exactly"
    assert "referrer" not in iceberg.scan().to_arrow().column_names
    table.rename_column("action", "event")  # the next write follows both, each with its own time and columns
    assert synced_version(iceberg_table(published)) == before + 2
    assert_every_version_is_its_snapshot(published)


@pytest.mark.parametrize("how", ["followed", "published"])
def test_a_column_dropped_and_another_added_keep_the_definitions_field_ids(published: Deployment, how: str) -> None:
    before = {f.name: f.field_id for f in iceberg_table(published).schema().fields}
    if how == "followed":  # each through the table API: each version follows at once
        table = Lake(published).table("web.access")
        table.drop_column("status")
        table.add_column("region", "string")
    else:  # through the catalog (as `silt table drop-column` and `add-column`): the next publish run commits both
        published.catalog.tables.drop_column("web.access", "status")
        published.catalog.tables.add_column("web.access", Column.from_mapping({"name": "region", "type": "string"}))
        assert synced_version(iceberg_table(published)) == 1
    table = Lake(published).table("web.access")
    table.append(
        pa.table(
            {
                "utc_event_time": times(2, 100),
                "user_id": pa.array([7, 8], pa.int64()),
                "action": ["c", "c"],
                "region": ["eu", "us"],
            }
        )
    )
    assert not publish_once(published).target_errors
    ids = table.record.definition.field_ids
    assert ids is not None
    after = {f.name: f.field_id for f in iceberg_table(published).schema().fields}
    assert after == {
        name: ids[name] for name in [*(c.name for c in table.record.definition.columns), PARTITION_COLUMN]
    }, "Iceberg's field ids are the definition's"
    assert "status" not in after and after["region"] not in before.values(), "the dropped column's id stays unused"
    assert {n: i for n, i in after.items() if n != "region"} == {n: i for n, i in before.items() if n != "status"}
    assert_every_version_is_its_snapshot(published)
    newest = rows(iceberg_table(published).scan().to_arrow())
    assert [(r["user_id"], r["region"]) for r in newest] == [(u, None) for u in range(1, 7)] + [(7, "eu"), (8, "us")]

"""Publish targets cost what changed: a run after one partition changed reads the versions published
since the target's synced one, not the table; a run that died between its target calls and its record is made
whole by the next; merge status counts what is pending and still counts it right."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.hive import HiveTarget
from siltlake.publish.iceberg.catalog import VERSION_PROPERTY, identifier, open_catalog
from siltlake.publish.iceberg.target import IcebergTarget
from siltlake.reap import reap_once
from siltlake.storage.keys import symlink_directory

from .merge_helpers import add_small_objects, rows_for
from .test_external_catalogs import hive_deployment, partition_storage, same_location  # noqa: F401 - a fixture
from .test_iceberg_target import NEXT_DAY, assert_same_as_siltlake, with_iceberg
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark
DAYS = 40  # the table's length; a run of one changed partition must read far fewer rows


@contextmanager
def rows_read(deployment: Deployment) -> Iterator[list[int]]:
    """The rows the catalog's SELECTs returned while open: each is replayed on its own connection at the end
    (same statement, same parameters) and its rows counted."""
    engine, seen = deployment.catalog.engine, []

    def collect(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")) and "pg_advisory" not in statement:
            seen.append((statement, parameters))

    counted: list[int] = []
    sa.event.listen(engine, "before_cursor_execute", collect)
    try:
        yield counted
    finally:
        sa.event.remove(engine, "before_cursor_execute", collect)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for statement, parameters in seen:
            cursor.execute(statement, parameters)
            counted.append(len(cursor.fetchall()))
        raw.rollback()
    finally:
        raw.close()


def long_table(deployment: Deployment):  # a TableRecord
    """A table of DAYS days, each with one small object, published (to the deployment's targets) at DAY noon."""
    table = make_table(deployment)
    for back in range(DAYS):
        day = DAY - dt.timedelta(days=back)
        add_small_objects(deployment, table, day, [rows_for(day, 2, back)])
    report = publish_once(deployment, now=tokyo(DAY, 12))
    assert report.target_errors == [] and len(report.live_versions) == DAYS
    return table


def sync_one_change(deployment: Deployment, target):  # a PublishTarget; a TableRecord
    """A long table synced to the target, then one new object today published by siltlake's catalog alone and
    synced by the target under rows_read; asserts the rows read and returns the table and the statements."""
    table = long_table(deployment)
    targets = deployment.config.publish.targets
    deployment.config.publish.targets = []
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 3, 100)])
    assert len(publish_once(deployment, now=tokyo(DAY, 13)).live_versions) == 1
    deployment.config.publish.targets = targets
    tables = {record.id: record for record in deployment.catalog.tables.list()}
    with rows_read(deployment) as counted:
        target.sync_tables(list(tables.values()))
        statements = target.sync_partitions(tables)
    # The whole table would be DAYS partitions and DAYS + 1 versions: no statement reads near that many rows, and
    # together they read far fewer than one statement over the whole table would.
    assert max(counted) < DAYS // 8 and sum(counted) < DAYS // 2, counted
    return table, statements


def test_an_iceberg_run_after_one_changed_partition_reads_what_changed(deployment: Deployment) -> None:
    table, statements = sync_one_change(with_iceberg(deployment), IcebergTarget(deployment))
    assert len(statements) == 1 and "+1 -0 files" in statements[0], statements
    assert_same_as_siltlake(deployment, "web.access", identifier(deployment, table))


def test_an_iceberg_run_after_versions_reaped_unsynced_starts_from_the_oldest_readable_one(
    deployment: Deployment,
) -> None:
    """Versions published while the target was off, the earlier of them reaped before any run synced them: the
    catch-up cannot replay them, so it writes the whole table at the oldest readable version, then each later
    one, and the current snapshot is exactly siltlake's."""
    table = make_table(with_iceberg(deployment))
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 4, 0)])
    assert publish_once(deployment, now=tokyo(DAY, 12)).target_errors == []  # table version 1, synced
    deployment.config.publish.targets = []
    for hour in (13, 14):  # two append versions of DAY (2, 3), not synced
        add_small_objects(deployment, table, DAY, [rows_for(DAY, 3, hour)])
        publish_once(deployment, now=tokyo(DAY, hour))
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # switches it: a compaction version over the merged object
    reap_once(deployment, now=utcnow() + dt.timedelta(days=8))  # past the retention: only the newest version
    oldest, newest = Lake(deployment).table("web.access").versions()
    assert oldest == newest > 3, (oldest, newest)

    deployment.config.publish.targets = ["iceberg"]
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 3)).target_errors == []
    assert_same_as_siltlake(deployment, "web.access", identifier(deployment, table))
    iceberg = open_catalog(deployment).load_table(identifier(deployment, table))
    # No snapshot claims a version that could no longer be read when the run came (2 .. newest - 1).
    assert [x.summary[VERSION_PROPERTY] for x in iceberg.snapshots()] == ["1", str(newest)]


def test_a_hive_run_after_one_changed_partition_reads_what_changed(
    hive_deployment: Deployment,  # noqa: F811
    spark,
) -> None:
    deployment = hive_deployment
    table, statements = sync_one_change(deployment, HiveTarget(deployment))
    assert len(statements) == 1 and "SET LOCATION" in statements[0] and str(DAY) in statements[0], statements
    (today,) = [p.id for p in deployment.catalog.partitions.list(table.id) if p.partition_date == DAY]
    newest = deployment.catalog.versions.of_partitions([today])[-1]
    hive = f"{deployment.config.publish.hive.database_prefix}web.access"
    location = partition_storage(spark, hive, DAY)["Location"]
    assert same_location(location, deployment.lake.engine_uri(symlink_directory(newest.file_list_key))), location


def test_a_hive_run_that_died_before_its_record_is_made_whole(hive_deployment: Deployment, spark) -> None:  # noqa: F811
    """The state such a run leaves: the metastore has the partition at its new location, the catalog neither
    recorded it nor moved the synced version (the syncing version is ahead). The next run asks the metastore
    and moves the partition to its newest version rather than leave it where ADD IF NOT EXISTS finds it."""
    deployment, catalog = hive_deployment, hive_deployment.catalog
    lake = deployment.lake
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 4, 1)])
    assert publish_once(deployment, now=tokyo(DAY, 12)).target_errors == []
    (synced,) = catalog.external_sync.synced_tables("hive").values()
    with catalog.engine.begin() as c:  # what a run that died after its ALTER TABLE ... ADD left behind
        c.execute(sa.delete(s.external_partitions))
        c.execute(sa.update(s.external_tables).values(synced_version=0, syncing_version=synced.synced_version))
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 4, 2)])
    report = publish_once(deployment, now=tokyo(DAY, 13))
    assert report.target_errors == []
    (newest,) = report.live_versions
    hive = f"{deployment.config.publish.hive.database_prefix}web.access"
    assert any("SHOW PARTITIONS" in x or "SET LOCATION" in x for x in report.external), report.external
    location = partition_storage(spark, hive, DAY)["Location"]
    assert same_location(location, lake.engine_uri(symlink_directory(newest.file_list_key))), location
    (after,) = catalog.external_sync.synced_tables("hive").values()
    assert after.synced_version == after.syncing_version == newest.table_version
    assert publish_once(deployment, now=tokyo(DAY, 14)).external == [], "synced: nothing more to do"


def test_the_first_hive_run_after_0018_drops_what_an_older_reap_removed(
    hive_deployment: Deployment,  # noqa: F811
    spark,
) -> None:
    """Before revision 0018 reap removed partitions without a removal row, and a run synced every partition: a
    catalog upgraded then has recorded partitions, no synced version, and may have a date the metastore still
    shows. Its first run asks the metastore once and drops that date; later runs do not ask."""
    deployment, catalog = hive_deployment, hive_deployment.catalog
    table = make_table(deployment)
    for day in (DAY, NEXT_DAY):
        add_small_objects(deployment, table, day, [rows_for(day, 3, day.day)])
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 12)).target_errors == []
    hive = f"{deployment.config.publish.hive.database_prefix}web.access"
    assert [r.partition for r in spark.sql(f"SHOW PARTITIONS {hive}").collect()] == [f"dt={DAY}", f"dt={NEXT_DAY}"]
    (old,) = [p.id for p in catalog.partitions.list(table.id) if p.partition_date == DAY]
    catalog.reaping.delete_partitions([old])
    with catalog.engine.begin() as c:  # as the older reap and the upgrade left it
        c.execute(sa.delete(s.external_removals))
        c.execute(sa.update(s.external_tables).values(synced_version=0, syncing_version=0))
    add_small_objects(deployment, table, NEXT_DAY, [rows_for(NEXT_DAY, 2, 99)])
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 13))
    assert report.target_errors == []
    assert [r.partition for r in spark.sql(f"SHOW PARTITIONS {hive}").collect()] == [f"dt={NEXT_DAY}"]
    (after,) = catalog.external_sync.synced_tables("hive").values()
    assert after.synced_version > 0, "synced now: the next run reads what is new only"


def recount(deployment: Deployment) -> dict[str, dict]:
    """Merge status's partition and unmerged-object counts, over every row (what status read before 0018)."""
    p, so, r, t = s.partitions, s.small_objects, s.merge_ranges, s.tables
    state = sa.case(
        (p.c.switched, "switched"),
        (p.c.last_live_object_id.is_not(None), "closed"),
        (p.c.current_manifest_version >= 0, "live"),
        else_="new",
    )
    upper = (
        sa.select(sa.func.coalesce(sa.func.max(r.c.upper_bound), 0))
        .where(r.c.partition_id == so.c.partition_id)
        .scalar_subquery()
    )
    found: dict[str, dict] = {}
    with deployment.catalog.engine.connect() as c:
        names = dict(c.execute(sa.select(t.c.id, t.c.schema_name + "." + t.c.table_name)).all())
        for table_id, kind, count in c.execute(
            sa.select(p.c.table_id, state, sa.func.count()).group_by(p.c.table_id, state)
        ):
            found.setdefault(names[table_id], {"partitions": {}, "unmerged": 0})["partitions"][kind] = count
        for table_id, count in c.execute(
            sa.select(p.c.table_id, sa.func.count())
            .select_from(so.join(p, p.c.id == so.c.partition_id))
            .where(so.c.id > upper)
            .group_by(p.c.table_id)
        ):
            found[names[table_id]]["unmerged"] = count
    return found


def test_merge_status_counts_what_is_pending_as_a_full_recount_does(plain_deployment: Deployment) -> None:
    deployment, catalog = plain_deployment, plain_deployment.catalog
    table = make_table(deployment, "status")
    days = [DAY - dt.timedelta(days=back) for back in range(4)]
    for day in days:
        add_small_objects(deployment, table, day, [rows_for(day, 3, day.day)], write_files=False)
    publish_once(deployment, now=tokyo(DAY, 12))  # the three past days close
    p, so, r, j = s.partitions, s.small_objects, s.merge_ranges, s.merge_jobs
    with catalog.engine.begin() as c:  # two past days merged and switched, as a merge and a publish leave them
        for day in days[2:]:
            pid, upper = c.execute(
                sa.select(p.c.id, sa.func.max(so.c.id))
                .join(so, so.c.partition_id == p.c.id)
                .where(p.c.partition_date == day)
                .group_by(p.c.id)
            ).one()
            c.execute(
                r.insert(),
                [
                    dict(
                        partition_id=pid,
                        lower_bound=None,
                        upper_bound=0,
                        content_length=0,
                        create_time=DAY,
                        update_time=DAY,
                    ),
                    dict(
                        partition_id=pid,
                        lower_bound=0,
                        upper_bound=upper,
                        content_length=1,
                        create_time=DAY,
                        update_time=DAY,
                    ),
                ],
            )
            c.execute(
                p.update()
                .where(p.c.id == pid)
                .values(switched=True, current_manifest_version=upper, desired_manifest_version=upper)
            )
            c.execute(j.delete().where(j.c.partition_id == pid))
        c.execute(sa.update(s.tables).where(s.tables.c.id == table.id).values(switched_partitions=2))
    add_small_objects(deployment, table, days[3], [rows_for(days[3], 2, 9)], write_files=False)  # delayed
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 2, 8)], write_files=False)

    def counts() -> dict[str, dict]:
        return {
            entry["table"]: {
                "partitions": {k: n for k, n in entry["partitions"].items() if n},
                "unmerged": entry["unmerged_objects"],
            }
            for entry in catalog.merge_queue.status(tokyo(DAY, 13), 60)
        }

    assert counts()["web.status"] == recount(deployment)["web.status"]
    assert counts()["web.status"]["partitions"] == {"switched": 2, "closed": 1, "live": 1}
    assert counts()["web.status"]["unmerged"] == 4  # today's two, the closed day's one, the delayed one

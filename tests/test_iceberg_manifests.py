"""The Iceberg target's manifests hold one year of `dt` each, so a commit costs the years it changes
(siltlake/publish/iceberg/manifests.py)."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter

import pytest

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish.iceberg import manifests as iceberg_manifests
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.manifests import day_bounds
from siltlake.reap import reap_once
from siltlake.write.update import delete_rows

from .merge_helpers import add_small_objects, rows_for
from .test_iceberg_target import assert_same_as_siltlake, published, with_iceberg
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark  # the deployment fixture starts the test session's Spark
EPOCH = dt.date(1970, 1, 1)
LAST_YEAR, NEXT_YEAR = dt.date(2025, 6, 5), dt.date(2027, 1, 9)


def manifests_by_year(deployment: Deployment) -> dict[int, list[str]]:
    """The current snapshot's data manifests, by the one year each holds (a manifest spanning two fails)."""
    table = open_catalog(deployment).load_table(("web", "access"))
    years: dict[int, list[str]] = {}
    for manifest in table.current_snapshot().manifests(table.io):
        first, last = (EPOCH + dt.timedelta(days=day) for day in day_bounds(manifest))
        assert first.year == last.year, f"{manifest.manifest_path}: {first} to {last}"
        years.setdefault(first.year, []).append(manifest.manifest_path)
    return years


def test_a_whole_table_commit_is_split_by_year_and_an_overwrite_rewrites_only_its_year(deployment: Deployment) -> None:
    with_iceberg(deployment)
    record = make_table(deployment)
    for seed, date in enumerate((DAY, DAY, DAY + dt.timedelta(days=1), LAST_YEAR, NEXT_YEAR)):
        add_small_objects(deployment, record, date, [rows_for(date, 10, seed)])
    published(deployment, tokyo(NEXT_YEAR, 12))  # the first snapshot: the whole table in one commit
    before = manifests_by_year(deployment)
    assert {year: len(paths) for year, paths in before.items()} == {2025: 1, 2026: 1, 2027: 1}
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))

    delete_rows(deployment, "web.access", DAY, "user_id % 2 = 0", now=tokyo(NEXT_YEAR, 13))
    published(deployment, tokyo(NEXT_YEAR, 14))  # an overwrite of one date of 2026
    after = manifests_by_year(deployment)
    assert after[2025] == before[2025] and after[2027] == before[2027], (
        "the years the overwrite did not change keep their manifests, unread and unwritten"
    )
    assert after[2026] != before[2026]
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))

    add_small_objects(deployment, record, LAST_YEAR, [rows_for(LAST_YEAR, 10, 9)])
    published(deployment, tokyo(NEXT_YEAR, 15))
    table = open_catalog(deployment).load_table(("web", "access"))
    kept = table.current_snapshot().manifests(table.io)
    assert all(m.has_added_files() or m.has_existing_files() for m in kept), (
        "a manifest of only the files an earlier snapshot deleted is not carried forward"
    )
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))


def test_a_years_manifests_are_merged_once_commits_leave_too_many(deployment: Deployment, monkeypatch) -> None:
    monkeypatch.setattr(iceberg_manifests, "YEAR_MANIFESTS", 3)
    with_iceberg(deployment)
    record = make_table(deployment)
    counts = []
    for seed in range(7):  # a live table: one small object a version, each published on its own
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 5, seed)])
        published(deployment, tokyo(DAY, 8 + seed))
        counts.append(len(manifests_by_year(deployment)[2026]))
    assert counts == [1, 2, 3, 1, 2, 3, 1], counts
    table = open_catalog(deployment).load_table(("web", "access"))
    assert Counter(len(table.scan(snapshot_id=s.snapshot_id).to_arrow()) for s in table.snapshots()) == Counter(
        5 * (n + 1) for n in range(7)
    ), "every snapshot still reads its own version's rows"
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))


def test_snapshots_past_the_iceberg_retention_go_with_the_next_commit_and_reap_deletes_their_metadata(
    deployment: Deployment,
) -> None:
    with_iceberg(deployment).config.publish.iceberg.snapshot_retention = 0  # only the current snapshot
    record = make_table(deployment)
    statements = []
    for seed in range(3):
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 5, seed)])
        statements += published(deployment, tokyo(DAY, 8 + seed))
    table = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary["siltlake.table-version"] for s in table.snapshots()] == ["3"]
    assert [len(table.metadata.snapshot_log), table.current_snapshot().parent_snapshot_id] == [1, None]
    assert sum("1 older snapshots expired" in line for line in statements) == 2, statements
    assert table.properties["gc.enabled"] == "false", "engines' own snapshot expiry must not delete files"
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))
    assert Lake(deployment).table("web.access").to_arrow(as_of_version=1).num_rows == 5, (
        "siltlake's own time travel keeps reap.retention"
    )

    metadata = record.layout(deployment.instance_key).iceberg_location()
    manifest_lists = [info.key for info in deployment.lake.list(metadata + "/") if "/snap-" in info.key]
    assert len(manifest_lists) == 3
    reap_once(deployment, now=utcnow() + dt.timedelta(days=4))  # past the grace for unnamed metadata files
    table = open_catalog(deployment).load_table(("web", "access"))
    kept = [info.key for info in deployment.lake.list(metadata + "/") if "/snap-" in info.key]
    assert len(kept) == 1 and table.current_snapshot().manifest_list.endswith(kept[0].rsplit("/", 1)[1]), (
        "the expired snapshots' manifest lists are deleted, the current one's stays"
    )
    assert len(table.scan().to_arrow()) == 15


def test_snapshots_inside_the_iceberg_retention_stay(deployment: Deployment) -> None:
    with_iceberg(deployment).config.publish.iceberg.snapshot_retention = 3600
    record = make_table(deployment)
    for seed in range(3):
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 5, seed)])
        published(deployment, tokyo(DAY, 8 + seed))
    table = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary["siltlake.table-version"] for s in table.snapshots()] == ["1", "2", "3"]
    assert [len(table.scan(snapshot_id=s.snapshot_id).to_arrow()) for s in table.snapshots()] == [5, 10, 15]


def pyiceberg_table(tmp_path):  # a path; a pyiceberg Table
    """A table partitioned by identity(dt) on a PyIceberg SQL catalog of its own (no siltlake deployment)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, LongType, NestedField

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'iceberg.db'}", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("web")
    return catalog.create_table(
        ("web", "wide"),
        Schema(NestedField(1, "n", LongType()), NestedField(2, "dt", DateType())),
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt")),
    )


def data_files(table, kind: str, days: list[int]) -> list:  # a pyiceberg Table
    """One registered (never written) data file a day."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    made = []
    for i, day in enumerate(days):
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=f"file:///{kind}/{i}.parquet",
            file_format=FileFormat.PARQUET,
            partition=Record(day),
            record_count=1,
            file_size_in_bytes=100,
        )
        data_file.spec_id = table.metadata.default_spec_id
        made.append(data_file)
    return made


def test_an_overwrite_across_hundreds_of_year_manifests_finds_every_removed_file(tmp_path) -> None:
    """PyIceberg's overwrite looks for the removed files on a thread pool with a manifest evaluator that is not
    thread-safe; with a manifest a year, a table of centuries has hundreds to judge (YearlyOverwrite)."""
    table = pyiceberg_table(tmp_path)
    days = [(dt.date(1700 + year, 1, 1) - EPOCH).days for year in range(400)]
    live, merged = data_files(table, "live", days), data_files(table, "merged", days)
    iceberg_manifests.commit_files(table, [], live, {})
    assert len(table.current_snapshot().manifests(table.io)) == 400
    # Without the evaluator's lock this commit failed three times in three ("Missing required files to delete").
    iceberg_manifests.commit_files(table, live, merged, {})
    assert sorted(f.file.file_path for f in table.scan().plan_files()) == sorted(f.file_path for f in merged)
    manifests = table.current_snapshot().manifests(table.io)
    assert sum(m.has_added_files() or m.has_existing_files() for m in manifests) == 400, "a year each"
    assert len(manifests) == 401, "and the commit's deletions in one manifest, left whole"


def test_a_commit_copies_the_table_metadata_once_per_state_of_its_updates(tmp_path, monkeypatch) -> None:
    """PyIceberg's transaction applies its updates to a whole copy of the table's metadata (every snapshot) on
    each read of it; siltlake's commits read one copy per state of the updates (OneCopyTransaction)."""
    import pyiceberg.table

    copies = []
    apply_updates = pyiceberg.table.update_table_metadata

    def counted(*args, **kwargs):  # update_table_metadata's own
        copies.append(1)
        return apply_updates(*args, **kwargs)

    monkeypatch.setattr(pyiceberg.table, "update_table_metadata", counted)
    table = pyiceberg_table(tmp_path)
    day = (dt.date(2026, 11, 28) - EPOCH).days
    first, second = data_files(table, "a", [day]), data_files(table, "b", [day])
    with table.transaction() as transaction, transaction.update_snapshot().fast_append() as producer:
        producer.append_data_file(first[0])
    pyiceberg_copies, copies[:] = len(copies), []
    iceberg_manifests.commit_files(table, [], second, {})
    assert pyiceberg_copies >= 8 and len(copies) <= 3, (pyiceberg_copies, len(copies))
    assert sorted(f.file.file_path for f in table.scan().plan_files()) == ["file:///a/0.parquet", "file:///b/0.parquet"]
    without_expiry, copies[:] = len(copies), []
    third = data_files(table, "c", [day])
    time.sleep(0.002)  # the snapshot before is a millisecond old at least
    assert iceberg_manifests.commit_files(table, [], third, {}, retention=0) == 2, "both older snapshots"
    assert len(copies) == without_expiry, "the expiry reads no further copy of the metadata"
    assert [s.snapshot_id for s in table.snapshots()] == [table.current_snapshot().snapshot_id]
    assert len(list(table.scan().plan_files())) == 3


def test_the_retention_expiry_keeps_a_tagged_snapshot(tmp_path) -> None:
    table = pyiceberg_table(tmp_path)
    day = (dt.date(2026, 11, 28) - EPOCH).days
    iceberg_manifests.commit_files(table, [], data_files(table, "a", [day]), {})
    tagged = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(tagged, "kept").commit()
    iceberg_manifests.commit_files(table, [], data_files(table, "b", [day]), {})
    time.sleep(0.002)
    assert iceberg_manifests.commit_files(table, [], data_files(table, "c", [day]), {}, retention=0) == 1
    assert {s.snapshot_id for s in table.snapshots()} == {tagged, table.current_snapshot().snapshot_id}
    assert set(table.metadata.refs) == {"main", "kept"}

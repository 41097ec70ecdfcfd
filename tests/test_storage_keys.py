"""siltlake.storage.keys: every key as existing lakes hold it (byte for byte), and parsed back to its parts."""

from __future__ import annotations

import datetime as dt

import pytest

from siltlake.storage import keys
from siltlake.storage.keys import TableLayout

DAY = dt.date(2026, 11, 20)
LAYOUT = TableLayout("k1", "web", "access")


def test_table_keys_are_the_layout_existing_lakes_hold() -> None:
    assert LAYOUT.prefix == "k1/web.access"
    assert LAYOUT.small_object(DAY, 7, False) == "k1/web.access/live/dt=2026-11-20/obj-0000000000000000007.parquet"
    assert LAYOUT.small_object(DAY, 7, True) == "k1/web.access/delayed/dt=2026-11-20/obj-0000000000000000007.parquet"
    assert (
        LAYOUT.merged_object(DAY, 0, 12)
        == "k1/web.access/merged/dt=2026-11-20/part-0000000000000000000-0000000000000000012.parquet"
    )
    assert (
        LAYOUT.update_object(DAY, "update-20261120T101500-0123456789ab")
        == "k1/web.access/merged/dt=2026-11-20/update-20261120T101500-0123456789ab.parquet"
    )
    assert LAYOUT.manifest_keys(DAY, 12) == (
        "k1/web.access/manifests/dt=2026-11-20/manifest-0000000000000000012.json",
        "k1/web.access/manifests/dt=2026-11-20/symlink-0000000000000000012/manifest",
    )
    assert LAYOUT.manifest_keys(DAY, 3, keys.live_label(3, 40)) == (
        "k1/web.access/manifests/dt=2026-11-20/manifest-live-000003-0000000000000000040.json",
        "k1/web.access/manifests/dt=2026-11-20/symlink-live-000003-0000000000000000040/manifest",
    )
    assert LAYOUT.live_prefix() == "k1/web.access/live"
    assert LAYOUT.live_partition(DAY) == "k1/web.access/live/dt=2026-11-20"
    assert LAYOUT.errors(5) == "k1/web.access/errors/staging-0000000000000000005.jsonl"
    # A run's temporaries are its own (reap takes a dead run's by its prefix, whatever lies under it): their names
    # inside the run may change between releases.
    assert LAYOUT.task_temporary("run-1", 5, keys.TASK_ERRORS) == "k1/_tmp/run-1/0000000000000000005.errors.jsonl"
    assert LAYOUT.task_temporary("run-1", 5, keys.TASK_INPUT) == "k1/_tmp/run-1/0000000000000000005.in.parquet"
    assert [keys.date_part(DAY), keys.spilled_run(DAY, 3), keys.merge_pass(DAY, 12)] == [
        "2026-11-20.parquet",
        "2026-11-20.run-0003.parquet",
        "2026-11-20.merged-0012.parquet",
    ]
    assert keys.load_job_run("run-1", "access") == "run-1/access"
    assert LAYOUT.iceberg_location() == "k1/_iceberg/web.access"


def test_instance_keys_are_the_layout_existing_lakes_hold() -> None:
    assert keys.instance_marker("k1") == "k1/_instance.json"
    assert keys.instance_prefix("k1") == "k1/"
    assert keys.temporary_run("k1", "run-1") == "k1/_tmp/run-1"
    assert keys.temporary("k1", "run-1", "x.parquet") == "k1/_tmp/run-1/x.parquet"
    assert keys.load_sql_run("load-1", "job") == "load-1/job/sql"
    assert keys.iceberg_warehouse("k1") == "k1/_iceberg"
    assert keys.iceberg_table_location("k1", "web", "access_2") == "k1/_iceberg/web.access_2"
    assert (
        keys.update_label(dt.datetime(2026, 11, 20, 10, 15, 0, 999), "0123456789ab")
        == "update-20261120T101500-0123456789ab"
    )
    assert (
        keys.replay_staging_key("web", "access", dt.datetime(2026, 11, 20, 23, 59), "ab" * 16)
        == f"replay.web.access/2026/11/20/replay-{'ab' * 16}.jsonl"
    )
    assert keys.load_error_file("file:///errors/", "load-1", "job", 3) == "file:///errors/load-1/job/task-00003.jsonl"
    assert keys.load_error_file("s3://b/errors", "load-1", "job", 3) == "s3://b/errors/load-1/job/task-00003.jsonl"


@pytest.mark.parametrize(
    "version, label", [(42, None), (7, "update-20261120T101500-0123456789ab"), (3, "live-000003-0000000000000000040")]
)
def test_manifest_keys_parse_back(version: int, label: str | None) -> None:
    json_key, symlink = LAYOUT.manifest_keys(DAY, version, label)
    assert keys.symlink_key(json_key) == symlink
    assert keys.symlink_directory(json_key) + "/manifest" == symlink
    assert keys.merged_directory_of(json_key) == "k1/web.access/merged/dt=2026-11-20"
    assert keys.merged_directory_of(json_key) == keys.split_key("k1", LAYOUT.merged_object(DAY, 1, 2)).directory


def test_a_key_without_a_manifests_area_reads_as_its_own_directory() -> None:
    assert keys.merged_directory_of("k1/web.access/other/dt=2026-11-20/x.json") == "k1/web.access/other/dt=2026-11-20"
    assert keys.merged_directory_of("manifests/x.json") == "manifests"  # the first segment is no area


@pytest.mark.parametrize("delayed", [False, True])
def test_small_objects_parse_back(delayed: bool) -> None:
    parts = keys.split_key("k1", LAYOUT.small_object(DAY, 123, delayed))
    assert parts is not None
    assert (parts.owner, parts.area, parts.partition_date, parts.depth) == (
        "web.access",
        keys.DELAYED if delayed else keys.LIVE,
        DAY,
        4,
    )
    assert keys.small_object_id(parts.name) == 123
    assert keys.merge_range_of(parts.name) is None and keys.update_label_of(parts.name) is None
    assert not parts.is_temporary and parts.temporary_run is None
    assert keys.is_table_segment(parts.owner)


def test_merged_and_update_objects_parse_back() -> None:
    parts = keys.split_key("k1", LAYOUT.merged_object(DAY, 10, 250))
    assert (parts.owner, parts.area, parts.partition_date) == ("web.access", keys.MERGED, DAY)
    assert keys.merge_range_of(parts.name) == (10, 250)
    assert keys.small_object_id(parts.name) is None and keys.update_label_of(parts.name) is None

    label = keys.update_label(dt.datetime(2026, 11, 20, 10, 15), "0123456789ab")
    update = keys.split_key("k1", LAYOUT.update_object(DAY, label))
    assert keys.update_label_of(update.name) == label
    assert keys.merge_range_of(update.name) is None
    # The manifest an update writes is found from its object's key alone.
    assert update.update_manifest_key(label) == LAYOUT.manifest_keys(DAY, 0, label)[0]


def test_errors_temporaries_and_the_marker_parse_back() -> None:
    errors = keys.split_key("k1", LAYOUT.errors(5))
    assert (errors.owner, errors.area, errors.depth, errors.partition_date) == ("web.access", keys.ERRORS, 3, None)

    temporary = keys.split_key("k1", LAYOUT.task_temporary("run-1", 5, "x.parquet"))
    assert temporary.is_temporary and temporary.temporary_run == keys.temporary_run("k1", "run-1")
    loose = keys.split_key("k1", "k1/_tmp/stray")  # directly under _tmp: temporary, but of no run
    assert loose.is_temporary and loose.temporary_run is None

    marker = keys.split_key("k1", keys.instance_marker("k1"))
    assert marker.owner is None and marker.area == "" and marker.name == keys.INSTANCE_MARKER
    assert keys.instance_of(LAYOUT.small_object(DAY, 1, False)) == "k1"
    assert keys.split_key("k1", "k2/web.access/live/dt=2026-11-20/obj-0000000000000000001.parquet") is None
    assert keys.split_key("k1", "k10/x") is None


@pytest.mark.parametrize(
    "segment, date", [("dt=2026-11-20", DAY), ("dt=2026-13-01", None), ("date=2026-11-20", None), ("live", None)]
)
def test_partition_segments(segment: str, date: dt.date | None) -> None:
    assert keys.partition_date_of(segment) == date
    if date is not None:
        assert keys.partition_segment(date) == segment


@pytest.mark.parametrize(
    "name",
    ["obj-7.parquet", "obj-0000000000000000007.parquet.tmp", "part-1-2.parquet", "update-x y.parquet", "update-.json"],
)
def test_names_siltlake_does_not_write_parse_to_nothing(name: str) -> None:
    assert keys.small_object_id(name) is None
    assert keys.merge_range_of(name) is None
    assert keys.update_label_of(name) is None


def test_table_segments() -> None:
    assert keys.table_segment("web", "access_2") == "web.access_2"
    assert keys.is_table_segment("web.access_2")
    for other in ("_tmp", "_iceberg", "Web.access", "web", "web.access.x", "1web.access"):
        assert not keys.is_table_segment(other), other


def test_partition_bases_and_area_globs() -> None:
    assert keys.partition_base(LAYOUT.small_object(DAY, 1, True)) == "k1/web.access/delayed"
    assert keys.partition_base("s3a://b/p/" + LAYOUT.merged_object(DAY, 1, 2)) == "s3a://b/p/k1/web.access/merged"
    assert keys.area_glob(keys.LIVE) == "*/*/live/dt=*/*.parquet"
    assert keys.area_glob(keys.MANIFESTS) == "*/*/manifests/dt=*/manifest-*.json"


def test_derived_build_keys_carry_their_reg_key() -> None:
    name = "test0001-0123456789abcdef"
    key = keys.build_object(name, dt.date(2026, 11, 20), 3)
    assert key == "_derived/test0001-0123456789abcdef/dt=2026-11-20/part-00003.parquet"
    assert keys.build_prefix(name) == "_derived/test0001-0123456789abcdef"
    assert keys.build_of(key) == name and keys.build_reg_key(name) == "test0001"
    assert keys.build_of("test0001/web.access/live/dt=2026-11-20/obj.parquet") is None
    for not_a_build in ("pending-" + "0" * 32, "TEST0001-0123456789abcdef", "test0001-0123", "x-0123456789abcdef"):
        assert keys.build_reg_key(not_a_build) is None


def test_writes_and_moves_make_their_directory_once_and_again_after_it_was_removed(tmp_path) -> None:
    import shutil

    from siltlake.storage.filesystem import Storage

    lake = Storage(str(tmp_path))
    made = []

    class Counting:  # pyarrow's file system type cannot be patched: a stand-in that counts create_dir
        def __init__(self, inner) -> None:
            self.inner = inner

        def __getattr__(self, name: str):
            return getattr(self.inner, name)

        def create_dir(self, path: str, **options: object) -> None:
            made.append(path)
            self.inner.create_dir(path, **options)

    lake._fs = Counting(lake.filesystem)
    for n in range(3):
        with lake.open_output(f"run/tmp/obj-{n}") as out:
            out.write(b"x")
    assert len(made) == 1
    shutil.rmtree(tmp_path / "run")  # a run's temporary prefix deleted by another process
    with lake.open_output("run/tmp/obj-9") as out:
        out.write(b"y")
    assert lake.read_bytes("run/tmp/obj-9") == b"y" and len(made) == 2
    for n in range(2):  # a commit moving a task's objects to their keys: one directory, made once
        with lake.open_output(f"run/tmp/move-{n}") as out:
            out.write(b"z")
        lake.move(f"run/tmp/move-{n}", f"live/dt=2026-11-20/obj-{n}")
    assert lake.read_bytes("live/dt=2026-11-20/obj-1") == b"z" and len(made) == 3

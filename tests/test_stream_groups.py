"""A wave's small staging objects decoded together into one object per (table, date), each exactly once."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from siltlake.catalog import PendingStagingObject, TableRecord
from siltlake.catalog import schema as s
from siltlake.deployment import Deployment
from siltlake.records.group_writer import GroupWriter
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout, small_object_id
from siltlake.stream import commit, stream_once
from siltlake.stream.stage import wave_groups
from siltlake.streamconfig import StreamConfig
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .test_stream import event, jsonl_gz, lake_files, stage

UTC = dt.UTC
# The Tokyo day turns at 15:00 UTC: objects around it span two partition dates.
TURN = dt.datetime(2026, 11, 20, 14, 50, tzinfo=UTC)


def _stage_many(deployment: Deployment, count: int, start: int = 0) -> dict[str, list[int]]:
    """`count` small objects whose rows straddle the date line; the user ids each holds, by URI."""
    held: dict[str, list[int]] = {}
    for n in range(start, start + count):
        ids = [n * 100 + i for i in range(1 + n % 7)]
        records = [event(TURN + dt.timedelta(minutes=(7 * i + 3 * n) % 20), user_id) for i, user_id in enumerate(ids)]
        uri = stage(deployment, f"f.web.access/2026/11/20/{n:03d}.jsonl.gz", jsonl_gz(records))
        held[uri] = ids
    return held


def _sources(deployment: Deployment) -> list[sa.Row]:
    with deployment.catalog.engine.connect() as c:
        return c.execute(sa.select(s.small_object_sources).order_by("small_object_id", "first_row")).all()


def _objects(deployment: Deployment) -> dict[int, tuple[int, str, int]]:
    """small object id -> (staging object id, key, row count), from the catalog and the lake."""
    keys = {small_object_id(key.rsplit("/", 1)[1]): key for key in lake_files(deployment, "live")}
    with deployment.catalog.engine.connect() as c:
        rows = c.execute(
            sa.select(s.small_objects.c.id, s.small_objects.c.staging_object_id, s.small_objects.c.row_count)
        ).all()
    return {row.id: (row.staging_object_id, keys[row.id], row.row_count) for row in rows}


def _uri_of(deployment: Deployment) -> dict[int, str]:
    with deployment.catalog.engine.connect() as c:
        return dict(c.execute(sa.select(s.staging_objects.c.id, s.staging_objects.c.uri)).all())


@pytest.mark.spark
def test_a_wave_of_small_objects_writes_one_object_per_group_and_date_with_exact_lineage(
    deployment: Deployment, access_table
) -> None:
    held = _stage_many(deployment, 40)
    report = stream_once(deployment)
    assert (report.processed, report.failed, report.unknown) == (40, [], [])
    assert report.records_loaded == sum(len(ids) for ids in held.values())
    objects = _objects(deployment)
    assert len(objects) == report.live_objects <= 2 * 2  # two cores' groups, two dates (was one per object and date)
    # Lineage: each source's range of its object holds exactly that staging object's rows of the date.
    uri_of = _uri_of(deployment)
    seen: dict[str, list[int]] = {uri: [] for uri in held}
    sources = _sources(deployment)
    by_object: dict[int, list[sa.Row]] = {}
    for row in sources:
        by_object.setdefault(row.small_object_id, []).append(row)
    for object_id, (first_source, key, row_count) in objects.items():
        ranges = by_object.get(object_id) or []
        table = pq.read_table(deployment.lake.path(key))
        assert table.num_rows == row_count
        if not ranges:  # one source only: the whole object is its
            seen[uri_of[first_source]] += table.column("user_id").to_pylist()
            continue
        assert ranges[0].staging_object_id == first_source
        assert [r.first_row for r in ranges] == [0] + [
            sum(r.row_count for r in ranges[:i]) for i in range(1, len(ranges))
        ]
        assert sum(r.row_count for r in ranges) == row_count
        for r in ranges:
            part = table.slice(r.first_row, r.row_count)
            ids = part.column("user_id").to_pylist()
            assert all(uid // 100 == int(uri_of[r.staging_object_id].rsplit("/", 1)[1][:3]) for uid in ids)
            times = part.column("utc_event_time").to_pylist()
            assert times == sorted(times)  # each source's rows in time order
            seen[uri_of[r.staging_object_id]] += ids
    assert {uri: sorted(ids) for uri, ids in seen.items()} == {uri: sorted(ids) for uri, ids in held.items()}
    # Nothing is streamed twice, and a second round has nothing to do.
    assert stream_once(deployment).processed == 0


@pytest.mark.spark
def test_a_bad_member_of_a_group_goes_its_own_way_and_the_others_commit(deployment: Deployment, access_table) -> None:
    held = _stage_many(deployment, 12)
    broken = stage(deployment, "f.web.access/2026/11/20/zz-broken.jsonl.gz", b"\x1f\x8b\x08\x00not gzip at all")
    half_bad = stage(
        deployment,
        "f.web.access/2026/11/20/zz-half.jsonl.gz",
        jsonl_gz([event(TURN, 99_000), {"time": "never", "user_id": 99_001}, event(TURN, 99_002)]),
    )
    report = stream_once(deployment)
    assert report.processed == 13 and report.failed == []
    assert [uri for uri, _ in report.unknown] == [broken]
    assert report.bad_records == 1 and report.bad_samples and report.bad_samples[0][0] == half_bad
    assert report.records_loaded == sum(len(ids) for ids in held.values()) + 2
    assert report.live_objects <= 4


@pytest.mark.spark
def test_a_group_whose_commit_fails_counts_against_each_then_each_commits_alone(
    deployment: Deployment, access_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _stage_many(deployment, 6)
    real = commit.commit_parts

    def refuses_groups(*args, **kwargs):
        parts = args[5]
        if any(len(part.get("sources", [])) > 1 for part in parts):
            raise ArithmeticError("a group's commit step")
        return real(*args, **kwargs)

    monkeypatch.setattr(commit, "commit_parts", refuses_groups)
    first = stream_once(deployment)
    assert first.processed == 0 and sorted(uri for uri, _ in first.failed) == sorted(held)
    assert all("ArithmeticError: a group's commit step (failed 1 of" in reason for _, reason in first.failed)
    second = stream_once(deployment)  # each failed once: each decodes and commits alone now
    assert (second.processed, second.failed) == (6, [])
    assert second.records_loaded == sum(len(ids) for ids in held.values())
    assert _sources(deployment) == []


@pytest.mark.spark
def test_a_group_member_committed_elsewhere_first_leaves_the_group_to_the_next_round(
    deployment: Deployment, access_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = _stage_many(deployment, 6)
    real = commit.commit_results
    taken: list[int] = []

    def another_daemon_commits_one_first(deployment_, results, tables, report, mark):
        # Another daemon that took over a stale claim committed this member just before us.
        member = next(iter(tables.values()))
        with deployment_.catalog.partitions.stream_commit() as tx:
            tx.mark_processed(member.id, records_in=0, bad_records=0, error_uri=None, now=dt.datetime(2026, 11, 21))
        taken.append(member.id)
        return real(deployment_, results, tables, report, mark)

    monkeypatch.setattr("siltlake.stream.runner.commit_results", another_daemon_commits_one_first)
    first = stream_once(deployment)
    assert first.skipped_duplicates >= 1 and first.records_loaded < sum(len(ids) for ids in held.values())
    monkeypatch.undo()
    second = stream_once(deployment)
    loaded = first.records_loaded + second.records_loaded
    taken_ids = len(held[_uri_of(deployment)[taken[0]]])
    assert loaded == sum(len(ids) for ids in held.values()) - taken_ids  # none twice, none lost but the taken one's
    assert not any("/_tmp/" in info.key for info in deployment.lake.list())


def _pending(index: int, size: int, table: TableRecord, failures: int = 0) -> PendingStagingObject:
    return PendingStagingObject(index + 1, f"file:///s/{index}", size, table, failures)


def _table(table_id: int, keyed: bool = False) -> TableRecord:
    mapping = dict(ACCESS_TABLE, name=f"t{table_id}")
    if keyed:
        mapping = {**mapping, "primary_key": ["user_id"]}
        mapping["columns"] = [
            {**column, "nullable": False} if column["name"] == "user_id" else column for column in mapping["columns"]
        ]
    return TableRecord(table_id, TableDef.from_mapping(mapping), "web", f"t{table_id}", dt.datetime(2026, 1, 1))


def test_wave_groups_keep_large_keyed_and_failed_objects_alone_and_give_every_core_a_group() -> None:
    plain, other, keyed = _table(1), _table(2), _table(3, keyed=True)
    settings = StreamConfig(group_bytes=1000, parallel_decode_bytes=5000)
    wave = [
        _pending(0, 100, plain),
        _pending(1, 100, keyed),
        _pending(2, 100, plain),
        _pending(3, 2000, plain),  # over group_bytes: alone
        _pending(4, 100, other),
        _pending(5, 100, plain, failures=1),  # failed before: alone
        _pending(6, 100, plain),
        _pending(7, 100, other),
    ]
    groups = wave_groups(wave, settings, cores=2)
    assert sorted(index for group in groups for index in group) == list(range(8))
    assert [1] in groups and [3] in groups and [5] in groups
    assert [0, 2] in groups and [6] in groups  # 300 bytes over two cores: groups of 150
    assert [4] in groups and [7] in groups
    assert wave_groups(wave, StreamConfig(group_bytes=0), cores=2) == [[i] for i in range(8)]


@settings(max_examples=40, deadline=None)
@given(
    sources=st.lists(
        st.lists(st.tuples(st.integers(0, 47), st.integers(0, 59)), min_size=0, max_size=30), min_size=1, max_size=8
    ),
    spill=st.sampled_from([1, 1 << 30]),
    together=st.integers(1, 4),
    in_order=st.booleans(),
)
def test_a_group_object_holds_each_source_once_as_one_time_ordered_range(
    tmp_path_factory: pytest.TempPathFactory,
    sources: list[list[tuple[int, int]]],
    spill: int,
    together: int,
    in_order: bool,
) -> None:
    """Whatever the sources' rows and dates, and however often the writer spills: each date's object is the
    sources' rows of that date, source after source, each in time order, at the ranges it reports. Sources given
    `together` at a time (add_sources, a joined read's) make the same objects as given one by one. A source's rows
    come shuffled, or `in_order` (as a shipper's mostly are, which the writer need not sort)."""
    root = tmp_path_factory.mktemp("group")
    table = TableDef.from_mapping(ACCESS_TABLE)
    lake = Storage(str(root))
    writer = GroupWriter(table, lake, TableLayout("test0001", "web", "access"), "run-1", 7, spill)
    base = dt.datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
    expected: dict[dt.date, list[tuple[int, list[int]]]] = {}
    batches: list[tuple[int, pa.Table]] = []
    for number, rows in enumerate(sources, start=1):
        if in_order:
            rows.sort()
        else:
            random.Random(number).shuffle(rows)
        times = [base + dt.timedelta(hours=hour, minutes=minute) for hour, minute in rows]
        ids = [number * 1000 + i for i in range(len(rows))]
        batch = pa.table(
            {
                "utc_event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
                "user_id": pa.array(ids, pa.int64()),
                "action": pa.array(["view"] * len(rows), pa.string()),
            },
            schema=table.arrow_schema(),
        )
        half = len(rows) // 2
        if together == 1:
            writer.add_source(number, [batch.slice(0, half), batch.slice(half)])
        else:
            batches.append((number, batch))
            if len(batches) == together:
                writer.add_sources(batches)
                batches = []
        per_date: dict[dt.date, list[tuple[dt.datetime, int]]] = {}
        for when, user_id in zip(times, ids, strict=True):
            per_date.setdefault((when + dt.timedelta(hours=9)).date(), []).append((when, user_id))
        for date, pairs in per_date.items():
            expected.setdefault(date, []).append((number, [uid for _, uid in sorted(pairs, key=lambda p: p[0])]))
    writer.add_sources(batches)
    parts = writer.finish()
    assert [part["date"] for part in parts] == sorted(date.isoformat() for date in expected)
    for part in parts:
        date = dt.date.fromisoformat(part["date"])
        got = pq.read_table(lake.path(part["tmp_key"]))
        assert got.num_rows == part["rows"]
        ids = got.column("user_id").to_pylist()
        wanted = expected[date]
        assert [source for source, _, _ in part["sources"]] == [number for number, _ in wanted]
        for (_, first, count), (_, source_ids) in zip(part["sources"], wanted, strict=True):
            got_ids = ids[first : first + count]
            assert sorted(got_ids) == sorted(source_ids)
            times = got.column("utc_event_time").to_pylist()[first : first + count]
            assert times == sorted(times)
        lake.delete(part["tmp_key"])


def test_sources_added_together_keep_a_column_named_as_the_writers_own_label(tmp_path) -> None:
    mapping = {**ACCESS_TABLE, "columns": [*ACCESS_TABLE["columns"], {"name": "__siltlake_source", "type": "int"}]}
    table = TableDef.from_mapping(mapping)
    lake = Storage(str(tmp_path))
    writer = GroupWriter(table, lake, TableLayout("test0001", "web", "access"), "run-1", 7, 1 << 30)
    when = dt.datetime(2026, 11, 20, 1, 0, tzinfo=UTC)
    batches = [
        (
            source,
            pa.table(
                {
                    "utc_event_time": [when] * 2,
                    "user_id": [source, source],
                    "action": ["v", "v"],
                    "__siltlake_source": [source * 10, source * 10 + 1],
                },
                schema=table.arrow_schema(),
            ),
        )
        for source in (1, 2)
    ]
    writer.add_sources(batches)
    (part,) = writer.finish()
    assert part["sources"] == [[1, 0, 2], [2, 2, 2]]
    assert pq.read_table(lake.path(part["tmp_key"])).column("__siltlake_source").to_pylist() == [10, 11, 20, 21]

"""A keyed table's merge on read in Iceberg's terms: every engine reads siltlake's rows at every version.

A keyed partition that needs a merge on read (small objects, an upsert's delta, a re-sent row repeated inside one
object, delete markers) is committed with a position delete file hiding the rows siltlake's keyed rule hides. At
each table version PyIceberg's scan, polars (native and PyIceberg readers), DataFusion through pyiceberg-core and
DuckDB (iceberg_scan, REST ATTACH by snapshot id and by snapshot time; in the readers venv) return siltlake's rows:
whole, counted, and filtered on the key.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.deletes import snapshot_deletes, target_of
from siltlake.publish.iceberg.snapshots import snapshot_files, snapshot_of_version
from siltlake.records.keyed import DELETE_MARKER
from siltlake.write.update import delete_rows

from .merge_helpers import add_small_objects, rows_for
from .test_iceberg_readers import attach_rest, datafusion_context, require_readers_venv, rows_of
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_upsert import KEYED, late

pytestmark = pytest.mark.spark
NEXT_DAY = DAY + dt.timedelta(days=1)
IDENT = ("web", "access")
# The query shapes: (name, SQL/PyIceberg filter or None, the key filter as a pyarrow expression).
CHANGED = "user_id < 25"
SHAPES = (("every column", None), ("key filter", CHANGED), ("count", None))


def upsert_rows(
    user_ids: list[int], value: tuple[str, str], date: dt.date = DAY, minute: int = 30, **extra: Any
) -> pa.Table:
    """Rows of these keys late on `date`, with `value` (column, text) and `extra` columns."""
    columns = {
        "utc_event_time": pa.array([late(date, minute)] * len(user_ids), pa.timestamp("us", tz="UTC")),
        "user_id": pa.array(user_ids, pa.int64()),
        **{k: pa.array(v) for k, v in extra.items()},
    }
    columns[value[0]] = pa.array([value[1]] * len(user_ids))
    return pa.table(columns)


def published(deployment: Deployment, now: dt.datetime) -> int:
    report = publish_once(deployment, now=now)
    assert not report.target_errors, report.target_errors
    return Lake(deployment).table("web.access").version


def keyed_walk(deployment: Deployment) -> tuple[list[int], dict[int, str]]:
    """The issue's case and more, published after each step: the table versions made and what each is."""
    deployment.config.publish.targets = ["iceberg"]
    record = make_table(deployment, **KEYED)
    table = Lake(deployment).table("web.access")
    made: dict[int, str] = {}

    def step(what: str, now: dt.datetime) -> None:
        version = published(deployment, now)
        made.setdefault(version, what)

    add_small_objects(deployment, record, DAY, [rows_for(DAY, 100, 0), rows_for(DAY, 100, 1)])
    add_small_objects(deployment, record, NEXT_DAY, [rows_for(NEXT_DAY, 30, 2)])
    step("two small objects: 200 rows on DAY, one object on NEXT_DAY", tokyo(DAY, 12))
    step("DAY closed", tokyo(NEXT_DAY, 0))
    merge_once(deployment)
    step("DAY switched to its merged object", tokyo(NEXT_DAY, 1))
    # 50 keys changed, 10 new: 210 rows, 60 upgraded (the Iceberg mirror showed 200 and 0).
    upgraded = upsert_rows([*range(50), *range(5_000_000, 5_000_010)], ("action", "upgraded"))
    table.upsert(upgraded, now=tokyo(NEXT_DAY, 2))
    made[table.version] = "upsert of 60 rows (50 changed, 10 new)"
    # A shipper's re-sent chunk: key 7 twice in one object (the later row wins) and key 1_000_003 again.
    add_small_objects(
        deployment,
        record,
        DAY,
        [
            [
                {"utc_event_time": late(DAY, 40), "user_id": 7, "action": "resent-1"},
                {"utc_event_time": late(DAY, 41), "user_id": 1_000_003, "action": "resent"},
                {"utc_event_time": late(DAY, 42), "user_id": 7, "action": "resent-2"},
            ]
        ],
    )
    step("a small object repeating a key inside itself", tokyo(NEXT_DAY, 3))
    deletes = pa.concat_tables(
        [
            upsert_rows([3, 4, 1_000_050, 5_000_001], ("action", "gone"), minute=45),
            upsert_rows([2_000_004], ("action", "gone"), NEXT_DAY, minute=45),
        ]
    )
    deletes = deletes.append_column("drop", pa.array([True, True, True, False, True]))
    table.upsert(deletes, delete_column="drop", now=tokyo(NEXT_DAY, 4))
    made[table.version] = "an upsert deleting four keys (one on NEXT_DAY) and changing one"
    table.add_column("referrer", "string", now=tokyo(NEXT_DAY, 4))
    made[table.version] = "referrer added"
    table.upsert(
        upsert_rows([10, 11, 5_000_002], ("action", "with-referrer"), minute=50, referrer=["r", "r", "r"]),
        now=tokyo(NEXT_DAY, 5),
    )
    made[table.version] = "an upsert with referrer"
    table.rename_column("action", "event", now=tokyo(NEXT_DAY, 5))
    made[table.version] = "action renamed to event"
    table.upsert(upsert_rows([12, 1_000_010], ("event", "renamed"), minute=55), now=tokyo(NEXT_DAY, 6))
    made[table.version] = "an upsert after the rename"
    table.drop_column("referrer", now=tokyo(NEXT_DAY, 6))
    made[table.version] = "referrer dropped"
    delete_rows(deployment, "web.access", DAY, "event = 'a1'", now=tokyo(NEXT_DAY, 7))
    step("silt delete rewrote DAY: no merge on read there any more", tokyo(NEXT_DAY, 8))
    table.upsert(upsert_rows([13, 14], ("event", "after-delete"), minute=58), now=tokyo(NEXT_DAY, 9))
    made[table.version] = "an upsert after the rewrite"
    published(deployment, tokyo(NEXT_DAY, 10))
    return list(range(min(made), max(made) + 1)), made


def expected(deployment: Deployment, version: int) -> tuple[list[str], dict[str, Counter]]:
    """siltlake's answer to each shape at `version`: its columns then, and the rows."""
    import pyarrow.compute as pc

    table = Lake(deployment).table("web.access")
    rows = table.to_arrow(as_of_version=version)
    names = sorted(rows.column_names)
    keyed = table.to_arrow(as_of_version=version, filter=pc.field("user_id") < 25)
    return names, {
        "every column": rows_of(rows, tuple(names)),
        "key filter": rows_of(keyed, tuple(names)),
        "count": Counter({(rows.num_rows,): 1}),
    }


def answer_rows(answer: pa.Table, shape: str, names: list[str]) -> Counter:
    if shape == "count":
        return Counter({(answer.column(0)[0].as_py(),): 1})
    return rows_of(answer, tuple(names))


def sql(shape: str, source: str) -> str:
    if shape == "count":
        return f"SELECT count(*) FROM {source}"
    return f"SELECT * FROM {source}" + (f" WHERE {CHANGED}" if shape == "key filter" else "")


PYTHON_READERS = ("pyiceberg", "polars native", "polars pyiceberg", "datafusion")


def python_answer(
    reader: str, iceberg: Any, snapshot: Any, datafusion: Any, version: int, shape: str, text: str | None
) -> pa.Table:
    """One reader's answer to one shape at one snapshot (PyIceberg's Table and Snapshot, a DataFusion session)."""
    import polars as pl

    if reader == "pyiceberg":
        scan = iceberg.scan(row_filter=text or "true", snapshot_id=snapshot.snapshot_id)
        return pa.table({"n": [scan.count()]}) if shape == "count" else scan.to_arrow()
    if reader == "datafusion":
        return datafusion.sql(sql(shape, f"v{version}")).to_arrow_table()
    frame = pl.scan_iceberg(iceberg, snapshot_id=snapshot.snapshot_id, reader_override=reader.split()[1])
    if text:
        frame = frame.filter(pl.col("user_id") < 25)
    return (frame.select(pl.len()) if shape == "count" else frame).collect().to_arrow()


def python_readers(deployment: Deployment, versions: list[int]) -> list[str]:
    """PyIceberg, polars and DataFusion at each version, against siltlake."""
    iceberg = open_catalog(deployment).load_table(IDENT)
    snapshots = {v: snapshot_of_version(iceberg, v) for v in versions}
    assert all(snapshots.values()), {v: s is not None for v, s in snapshots.items()}
    datafusion = datafusion_context(iceberg, snapshots)
    wrong = []
    for version, snapshot in snapshots.items():
        names, answers = expected(deployment, version)
        for shape, text in SHAPES:
            for reader in PYTHON_READERS:
                try:
                    got = answer_rows(
                        python_answer(reader, iceberg, snapshot, datafusion, version, shape, text), shape, names
                    )
                except Exception as exc:  # a reader's error is a finding, reported with the others
                    wrong.append(
                        f"version {version}, {shape}: {reader} fails: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''}"
                    )
                    continue
                if got != answers[shape]:
                    wrong.append(describe(version, shape, reader, got, answers[shape]))
    return wrong


def describe(version: int, shape: str, reader: str, found: Counter, expected: Counter) -> str:
    extra, missing = sum((found - expected).values()), sum((expected - found).values())
    if shape == "count":
        return f"version {version}, count: {reader} counts {next(iter(found))[0]}, siltlake {next(iter(expected))[0]}"
    return (
        f"version {version}, {shape}: {reader} returns {sum(found.values())} rows ({extra} extra, {missing} "
        f"missing) of {sum(expected.values())}"
    )


def duckdb_readers(deployment: Deployment, versions: list[int]) -> list[str]:
    """DuckDB's iceberg_scan and a REST catalog ATTACHed, by snapshot id and by snapshot time."""
    from siltlake.publish.iceberg.rest import IcebergRestServer

    from .duckdb_iceberg_runner import run_queries

    iceberg = open_catalog(deployment).load_table(IDENT)
    cases, queries = [], []
    for version in versions:
        snapshot = snapshot_of_version(iceberg, version)
        names, answers = expected(deployment, version)
        for reader, source in {
            "duckdb iceberg_scan": f"iceberg_scan('{iceberg.metadata_location}', "
            f"snapshot_from_id => {snapshot.snapshot_id})",
            "duckdb REST attach": f"lake.web.access AT (VERSION => {snapshot.snapshot_id})",
            "duckdb REST attach by snapshot time": (
                f"lake.web.access AT (TIMESTAMP => epoch_ms({snapshot.timestamp_ms}))"
            ),
        }.items():
            for shape, _ in SHAPES:
                cases.append((version, shape, reader, names, answers[shape]))
                queries.append(sql(shape, source))
    server = IcebergRestServer(deployment, "127.0.0.1", 0).start()
    try:
        found = run_queries(queries, setup=(attach_rest(server.url),))
    finally:
        server.close()
    wrong = []
    for (version, shape, reader, names, answer), got in zip(cases, found, strict=True):
        if isinstance(got, str):
            wrong.append(f"version {version}, {shape}: {reader} fails: {got.splitlines()[0]}")
        elif (rows := answer_rows(got, shape, names)) != answer:
            wrong.append(describe(version, shape, reader, rows, answer))
    return wrong


def test_every_engine_reads_a_keyed_tables_unmerged_upserts_and_deletes_as_siltlake(deployment: Deployment) -> None:
    versions, made = keyed_walk(deployment)
    table = Lake(deployment).table("web.access")
    upserted = next(v for v, what in made.items() if what.startswith("upsert of 60"))
    at_upsert = table.to_arrow(as_of_version=upserted)
    assert at_upsert.filter(pa.compute.equal(at_upsert.column("dt"), DAY)).num_rows == 210
    assert at_upsert.column("action").to_pylist().count("upgraded") == 60

    iceberg = open_catalog(deployment).load_table(IDENT)
    carried = set()  # delete files a later version keeps (its data file hides the same rows)
    previous: set[str] = set()
    for version in versions:
        snapshot = snapshot_of_version(iceberg, version)
        deletes = snapshot_deletes(iceberg, snapshot)
        carried |= previous & {f.file_path for f in deletes}
        previous = {f.file_path for f in deletes}
        listed = {f.file_path for f in snapshot_files(iceberg, snapshot)}
        targets = [target_of(f) for f in deletes]
        assert len(set(targets)) == len(targets) and set(targets) <= listed, (
            f"version {version}: one delete file for a data file of the snapshot, naming it"
        )
        for delete, target in zip(deletes, targets, strict=True):
            named = pq.read_table(delete.file_path.removeprefix("file://"))
            assert set(named.column("file_path").to_pylist()) == {target} and named.num_rows == delete.record_count
            assert named.column("pos").to_pylist() == sorted(set(named.column("pos").to_pylist()))
    assert carried, "a delete file hiding the same rows is kept, not written again"
    rewritten = next(v for v, what in made.items() if what.startswith("silt delete"))
    assert not snapshot_deletes(iceberg, snapshot_of_version(iceberg, rewritten), {DAY}), (
        "a partition rewritten whole has no delete file"
    )
    assert snapshot_deletes(iceberg, snapshot_of_version(iceberg, upserted), {DAY})
    summary = snapshot_of_version(iceberg, upserted).summary
    assert summary["operation"].value == "overwrite" and int(summary["total-position-deletes"]) >= 50

    wrong = python_readers(deployment, versions)
    assert not wrong, "\n".join(wrong)
    require_readers_venv()
    wrong = duckdb_readers(deployment, versions)
    assert not wrong, "\n".join(wrong)


def test_the_sequence_column_decides_which_row_iceberg_shows(deployment: Deployment) -> None:
    """A keyed table with a sequence column: a later upsert with a smaller sequence value loses, so the newest file's
    row is the one hidden (an equality delete could not say that)."""
    deployment.config.publish.targets = ["iceberg"]
    columns = [
        {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
        {"name": "user_id", "type": "bigint", "nullable": False},
        {"name": "action", "type": "string"},
        {"name": "seq", "type": "bigint"},
    ]
    record = make_table(deployment, primary_key=["user_id"], sequence_column="seq", columns=columns)
    add_small_objects(deployment, record, DAY, [[{**row, "seq": 5} for row in rows_for(DAY, 20, 0)]])
    first = published(deployment, tokyo(DAY, 12))
    table = Lake(deployment).table("web.access")
    rows = upsert_rows(list(range(10)), ("action", "upserted"), seq=[3] * 5 + [9] * 5)
    table.upsert(rows, now=tokyo(DAY, 13))
    second = published(deployment, tokyo(DAY, 14))
    shown = table.to_arrow(as_of_version=second)
    assert shown.column("action").to_pylist().count("upserted") == 5, "the smaller sequence values lost"
    wrong = python_readers(deployment, [first, second])
    assert not wrong, "\n".join(wrong)
    assert DELETE_MARKER not in shown.column_names


def test_delete_files_go_with_their_partition_past_its_ttl_and_reap_deletes_them(deployment: Deployment) -> None:
    from siltlake.clock import utcnow
    from siltlake.reap import reap_once

    deployment.config.publish.targets = ["iceberg"]
    record = make_table(deployment, ttl_days=2, **KEYED)
    later = DAY + dt.timedelta(days=4)
    # Keys 0..9 twice on each date: each date's first object has 10 hidden rows.
    for date in (DAY, later):
        add_small_objects(deployment, record, date, [rows_for(date, 10, 0), rows_for(date, 10, 0)])
    published(deployment, tokyo(DAY, 12))
    iceberg = open_catalog(deployment).load_table(IDENT)
    files = {
        partition: [f.file_path for f in snapshot_deletes(iceberg, iceberg.current_snapshot(), {partition})]
        for partition in (DAY, later)
    }
    assert [len(paths) for paths in files.values()] == [1, 1] and iceberg.scan().count() == 20

    reap_once(deployment, now=tokyo(later, 12))
    iceberg = open_catalog(deployment).load_table(IDENT)
    assert not snapshot_deletes(iceberg, iceberg.current_snapshot(), {DAY}), "DAY's delete file left with DAY"
    assert [f.file_path for f in snapshot_deletes(iceberg, iceberg.current_snapshot())] == files[later]
    assert rows_of(iceberg.scan().to_arrow(), ("user_id", "action", "dt")) == rows_of(
        Lake(deployment).table("web.access").to_arrow(), ("user_id", "action", "dt")
    )

    def exists(path: str) -> bool:
        return deployment.lake.exists(deployment.lake.key_of(path.removeprefix("file://")))

    assert all(exists(path) for paths in files.values() for path in paths), "older snapshots still list them"
    assert wrong_readers(deployment) == []
    # Past both dates' TTL, the retention and the grace period: every snapshot listing a delete file expired.
    reap_once(deployment, now=utcnow() + dt.timedelta(days=30))
    iceberg = open_catalog(deployment).load_table(IDENT)
    assert not snapshot_deletes(iceberg, iceberg.current_snapshot()) and iceberg.scan().count() == 0
    assert not any(exists(path) for paths in files.values() for path in paths), (
        "reap deleted the delete files no snapshot lists"
    )


def wrong_readers(deployment: Deployment) -> list[str]:
    """The Python readers' disagreements at the table's one readable version."""
    newest = Lake(deployment).table("web.access").version
    return python_readers(deployment, [newest])

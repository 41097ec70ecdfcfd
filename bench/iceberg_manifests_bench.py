#!/usr/bin/env python
"""Iceberg commits of a live table over many versions: PyIceberg's own producers against siltlake's
manifests by year (siltlake/publish/iceberg/manifests.py), side by side on one PyIceberg SQL catalog.

A table of `--days` daily partitions (one file each, its first snapshot in one commit), then `--appends` fast
appends of one file to today's date (a live table publishing a version a minute), then `--overwrites` overwrites
each replacing one past day's file (a merge). Timed: each commit; reported: the median of the last 20 appends and
of the overwrites, the manifests the current snapshot lists and the snapshots the table keeps. Files are registered,
not written (no data is read: the cost is the metadata's). A third peer is siltlake's commit with a snapshot
retention of `--retention` seconds (publish.iceberg.snapshot_retention): snapshots older are expired with each
commit, as a live table's are in production (a day of minute-by-minute versions there, a few seconds here).

    .venv/bin/python bench/iceberg_manifests_bench.py --days 3650 --appends 400 --overwrites 20
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import brief_machine, load_avg_1m, save_json, utc_stamp

from siltlake.publish.iceberg import manifests as iceberg_manifests

EPOCH = dt.date(1970, 1, 1)


def data_file(table, path: str, date: dt.date):  # a pyiceberg Table; its DataFile
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    made = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record((date - EPOCH).days),
        record_count=100,
        file_size_in_bytes=4096,
    )
    made.spec_id = table.metadata.default_spec_id
    return made


def pyiceberg_commit(table, removed: list, added: list) -> None:  # a pyiceberg Table
    """PyIceberg's own fast append or overwrite, as the target committed before its manifests by year."""
    with table.transaction() as transaction:
        update = transaction.update_snapshot()
        with update.overwrite() if removed else update.fast_append() as producer:
            for f in removed:
                producer.delete_data_file(f)
            for f in added:
                producer.append_data_file(f)


def run(peer: str, args: argparse.Namespace, workdir: Path) -> dict:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, LongType, NestedField

    root = workdir / peer
    root.mkdir()
    catalog = SqlCatalog(peer, uri=f"sqlite:///{root / 'iceberg.db'}", warehouse=f"file://{root}")
    catalog.create_namespace("web")
    table = catalog.create_table(
        ("web", "t"),
        Schema(NestedField(1, "n", LongType()), NestedField(2, "dt", DateType())),
        partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "dt")),
    )
    if peer == "pyiceberg":

        def commit(t, removed, added, _) -> None:
            pyiceberg_commit(t, removed, added)
    else:
        retention = args.retention if peer == "siltlake_retention" else None

        def commit(t, removed, added, summary) -> None:
            iceberg_manifests.commit_files(t, removed, added, summary, retention)

    today = dt.date(2026, 11, 28)
    days = [today - dt.timedelta(days=d) for d in range(args.days)]
    current = {day: data_file(table, f"file:///lake/{day}/merged-0.parquet", day) for day in days}
    commit(table, [], list(current.values()), {})
    appends, overwrites = [], []
    for i in range(args.appends):
        started = time.perf_counter()
        commit(table, [], [data_file(table, f"file:///lake/{today}/live-{i}.parquet", today)], {})
        appends.append(time.perf_counter() - started)
    for i in range(args.overwrites):
        day = days[1 + (i * 97) % (len(days) - 1)]
        new = data_file(table, f"file:///lake/{day}/merged-{i + 1}.parquet", day)
        started = time.perf_counter()
        commit(table, [current[day]], [new], {})
        overwrites.append(time.perf_counter() - started)
        current[day] = new
    listed = sorted(f.file.file_path for f in table.scan().plan_files())
    expected = sorted(
        [
            *(f.file_path for f in current.values()),
            *(f"file:///lake/{today}/live-{i}.parquet" for i in range(args.appends)),
        ]
    )
    assert listed == expected, f"{peer}: the table lists other files than were committed"
    manifests = table.current_snapshot().manifests(table.io)
    return {
        "peer": peer,
        "append_last20_median_ms": round(statistics.median(appends[-20:]) * 1000, 2),
        "append_first20_median_ms": round(statistics.median(appends[:20]) * 1000, 2),
        "overwrite_median_ms": round(statistics.median(overwrites) * 1000, 2) if overwrites else None,
        "manifests": len(manifests),
        "files": len(listed),
        "snapshots": len(table.snapshots()),
        "metadata_file_bytes": Path(table.metadata_location.removeprefix("file://")).stat().st_size,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=3650)
    parser.add_argument("--appends", type=int, default=400)
    parser.add_argument("--overwrites", type=int, default=20)
    parser.add_argument("--retention", type=float, default=3.0, help="seconds of snapshots the third peer keeps")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "iceberg_manifests.json"
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="iceberg-manifests-"))
    results = []
    try:
        for peer in ("pyiceberg", "siltlake", "siltlake_retention"):
            load = load_avg_1m()
            result = run(peer, args, workdir)
            result["load_avg_1m_before"] = load
            results.append(result)
            print(
                f"  {peer:>18}: appends {result['append_first20_median_ms']:.1f} ms (first 20) -> "
                f"{result['append_last20_median_ms']:.1f} ms (last 20), overwrite "
                f"{result['overwrite_median_ms']} ms, {result['manifests']} manifests, {result['snapshots']} "
                f"snapshots, metadata {result['metadata_file_bytes']:,} B, load {load}",
                flush=True,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    save_json(args.out, {"machine": brief_machine(), "date": utc_stamp(), "args": vars(args), "results": results})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Read benchmark: one day of a 1,000-partition table through siltlake, delta-rs and PyIceberg, same files.

The table (bench.t, 1,000 days by default; also 10 and 100 for the catalog-statement counts) is built
as bench/publish_bench.py's reader part builds it, through siltlake's real commit and publish path: two
small objects of 20 rows a day, the first half of the days closed, merged (real merged objects),
switched and published as merged versions; the second half live, published twice, with one more
object each not yet published. Its current state's data files (Table.data_files()) are then
registered, without copying, in:

  delta-rs   a Delta table whose root is the siltlake table's directory (relative add paths, `dt` a
             date partition column from each add's partition values), one commit of add actions;
  PyIceberg  a SQL-catalog (SQLite) Iceberg table, partitioned by day(time), one add_files commit.
             siltlake's files carry no `dt` column and Iceberg cannot infer an identity partition for
             a column absent from the file, so the day (a Tokyo date) is read as a time range: the UTC
             day transform prunes to the two UTC days the range touches, then column bounds to the day.

For a merged and a live day, each reader plans, returns its first batch, and reads the day in full,
interleaved, best and median of --repeats:

  siltlake   plan: Table.data_files(dates=[day]); first batch: to_pyarrow_dataset(dates=[day]) and its
             first batch; read: to_arrow(dates=[day]) and to_arrow(filter=dt == day) (no dates: the
             filter prunes the partitions), with the catalog statements each issues;
  delta-rs   plan: DeltaTable(root) and its files of the day; first batch / read:
             DeltaTable(root).to_pyarrow_dataset(file_pruning_predicate=[("dt", "=", day)]) and the same dataset
             without partitions= filtered on dt;
  PyIceberg  plan: table.scan(time range).plan_files() (the catalog's metadata pointer read first);
             first batch: to_arrow_batch_reader(); read: to_arrow().

Run from the repository root:  .venv/bin/python bench/read_bench.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from common import ROOT, StatementCounter, catalog_url, load_avg_1m, machine, new_deployment, write_report
from publish_bench import FIRST_DAY, reader_table

from siltlake.lake import Lake, Table


def timed(action: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def first_batch(batches) -> int:  # an iterator of record batches
    for batch in batches:
        if batch.num_rows:
            return batch.num_rows
    return 0


# --------------------------------------------------------------------------------------------------
# siltlake


def siltlake_cases(table: Table, day: dt.date) -> dict[str, Callable[[], object]]:
    on_day = pc.field("dt") == day
    return {
        "plan": lambda: len(table.data_files(dates=[day])),
        "first_batch": lambda: first_batch(table.to_pyarrow_dataset(dates=[day]).to_batches()),
        "read": lambda: table.to_arrow(dates=[day]).num_rows,
        "read_filter_only": lambda: table.to_arrow(filter=on_day).num_rows,
    }


def statements_per_read(table: Table, counter: StatementCounter, day: dt.date) -> dict[str, int]:
    """Catalog statements each siltlake read issues (the table handle already open)."""
    counts = {}
    for case, action in siltlake_cases(table, day).items():
        before = counter.statements
        action()
        counts[case] = counter.statements - before
    return counts


# --------------------------------------------------------------------------------------------------
# delta-rs over the same files


def delta_table_over(table: Table, root: Path, stats: bool = False) -> str:
    """A Delta table at the siltlake table's directory whose one commit adds exactly the current
    state's data files by relative path (no copy); `dt` from each add's partition values; with `stats`,
    each add carries the file's row count and event time range as Delta statistics."""
    import json

    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    schema = table.schema
    shutil.rmtree(root / "_delta_log", ignore_errors=True)
    DeltaTable.create(str(root), schema=schema, partition_by=["dt"])
    prefix = root.as_uri() + "/"
    actions = []
    column = table.record.definition.time_column
    for f in table.data_files():
        if not f.uri.startswith(prefix):
            raise RuntimeError(f"{f.uri} is not under {prefix}")
        path = Path(f.uri.removeprefix("file://"))
        actions.append(
            AddAction(
                path=f.uri[len(prefix) :],
                size=path.stat().st_size,
                partition_values={"dt": f.partition_date.isoformat()},
                modification_time=int(path.stat().st_mtime * 1000),
                data_change=True,
                stats=json.dumps(
                    {
                        "numRecords": f.rows,
                        "minValues": {column: f"{f.min_event_time.isoformat()}Z"},
                        "maxValues": {column: f"{f.max_event_time.isoformat()}Z"},
                        "nullCount": {column: 0},
                    }
                )
                if stats
                else None,
            )
        )
    DeltaTable(str(root)).create_write_transaction(actions, mode="append", schema=schema, partition_by=["dt"])
    return str(root)


def delta_cases(root: str, day: dt.date) -> dict[str, Callable[[], object]]:
    from deltalake import DeltaTable

    on_day = pc.field("dt") == day
    pruned = [("dt", "=", day.isoformat())]

    def day() -> object:
        return DeltaTable(root).to_pyarrow_dataset(file_pruning_predicate=pruned)

    return {
        "plan": lambda: len(DeltaTable(root).file_uris(file_pruning_predicate=pruned)),
        "first_batch": lambda: first_batch(day().to_batches()),
        "read": lambda: day().to_table().num_rows,
        "read_filter_only": lambda: DeltaTable(root).to_pyarrow_dataset().to_table(filter=on_day).num_rows,
    }


# --------------------------------------------------------------------------------------------------
# PyIceberg over the same files


def iceberg_table_over(table: Table, workdir: Path) -> Callable[[], object]:
    """A SQLite-catalog Iceberg table partitioned by day(time) holding exactly the current state's
    data files (add_files: no copy); returns a loader of the table as a reader would load it."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.transforms import DayTransform

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    catalog = SqlCatalog("bench", uri=f"sqlite:///{workdir / 'iceberg.db'}", warehouse=workdir.as_uri())
    catalog.create_namespace("bench")
    columns = pa.schema([field for field in table.schema if field.name != "dt"])
    created = catalog.create_table("bench.t", schema=columns)
    with created.update_spec() as update:
        update.add_field(table.record.definition.time_column, DayTransform(), "day")
    created = catalog.load_table("bench.t")
    created.add_files([f.uri for f in table.data_files()])
    return lambda: catalog.load_table("bench.t")


def iceberg_cases(load_table: Callable[[], object], table: Table, day: dt.date) -> dict[str, Callable[[], object]]:
    from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan

    zone = dt.timedelta(hours=9)  # bench.t's timezone, Asia/Tokyo (no daylight saving)
    start = dt.datetime.combine(day, dt.time()) - zone
    column = table.record.definition.time_column
    window = And(
        GreaterThanOrEqual(column, start.isoformat() + "+00:00"),
        LessThan(column, (start + dt.timedelta(days=1)).isoformat() + "+00:00"),
    )
    return {
        "plan": lambda: len(list(load_table().scan(row_filter=window).plan_files())),
        "first_batch": lambda: first_batch(load_table().scan(row_filter=window).to_arrow_batch_reader()),
        "read": lambda: load_table().scan(row_filter=window).to_arrow().num_rows,
    }


# --------------------------------------------------------------------------------------------------


def measure(readers: dict[str, dict[str, Callable[[], object]]], repeats: int) -> dict:
    """Each case of each reader, warmed once, then run `repeats` times interleaved across readers."""
    times: dict[str, dict[str, list[float]]] = {name: {case: [] for case in cases} for name, cases in readers.items()}
    results: dict[str, dict[str, object]] = {name: {} for name in readers}
    for name, cases in readers.items():
        for case, action in cases.items():
            results[name][case] = action()
    for _ in range(repeats):
        for name, cases in readers.items():
            for case, action in cases.items():
                seconds, result = timed(action)
                if result != results[name][case]:
                    raise RuntimeError(f"{name} {case}: {result} then {results[name][case]}")
                times[name][case].append(seconds)
    return {
        name: {
            case: {
                "best_ms": round(min(values) * 1000, 2),
                "median_ms": round(statistics.median(values) * 1000, 2),
                "result": results[name][case],
            }
            for case, values in cases.items()
        }
        for name, cases in times.items()
    }


def ratios(figures: dict) -> dict:
    out = {}
    for peer in ("delta_rs", "pyiceberg"):
        for case in ("plan", "first_batch", "read", "read_filter_only"):
            if case in figures.get(peer, {}):
                ours, theirs = figures["siltlake"][case]["median_ms"], figures[peer][case]["median_ms"]
                out[f"siltlake/{peer} {case}"] = round(ours / theirs, 2) if theirs else None
    return out


def run_size(kind: str, size: int, args, with_peers: bool) -> dict:
    root = args.workdir / f"read-{kind}-{size}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    with catalog_url(kind, root) as url:
        deployment = new_deployment("pbench01", root, catalog_url=url)
        try:
            seconds, state = timed(lambda: reader_table(deployment, size))
            del state["table"]
            lake = Lake(deployment)
            counter = StatementCounter(deployment.catalog.engine)
            before = counter.statements
            table = lake.table("bench.t")
            record: dict = {
                "partitions": size,
                "setup_seconds": round(seconds, 1),
                **state,
                "open_table_statements": counter.statements - before,
            }
            days = {
                "merged_day": FIRST_DAY + dt.timedelta(days=size // 4),
                "live_day": FIRST_DAY + dt.timedelta(days=size // 2 + size // 4),
            }
            for label, day in days.items():
                record[label] = {"date": day.isoformat(), "statements": statements_per_read(table, counter, day)}
            if not with_peers:
                return record
            started = time.perf_counter()
            delta_root = delta_table_over(
                table, Path(deployment.lake.path(table.record.layout(deployment.instance_key).prefix))
            )
            load_iceberg = iceberg_table_over(table, root / "iceberg")
            record["peer_setup_seconds"] = round(time.perf_counter() - started, 1)
            record["files"] = len(table.data_files())
            for label, day in days.items():
                readers = {
                    "siltlake": siltlake_cases(table, day),
                    "delta_rs": delta_cases(delta_root, day),
                    "pyiceberg": iceberg_cases(load_iceberg, table, day),
                }
                record[label]["load_avg_1m_before"] = load_avg_1m()
                figures = measure(readers, args.repeats)
                rows = {name: figures[name]["read"]["result"] for name in figures}
                if len(set(rows.values())) != 1:
                    raise RuntimeError(f"{label} {day}: readers disagree on the day's rows: {rows}")
                record[label].update(figures=figures, ratios=ratios(figures), load_avg_1m_after=load_avg_1m())
            return record
        finally:
            deployment.close()


def print_table(record: dict) -> None:
    for label in ("merged_day", "live_day"):
        day = record[label]
        print(
            f"\n{record['partitions']} partitions, {label.replace('_', ' ')} {day['date']} "
            f"({day['figures']['siltlake']['read']['result']} rows); median ms (best)"
        )
        print(f"  {'':18}" + "".join(f"{name:>20}" for name in day["figures"]))
        for case in ("plan", "first_batch", "read", "read_filter_only"):
            cells = []
            for name in day["figures"]:
                figure = day["figures"][name].get(case)
                cells.append(f"{figure['median_ms']:>11.1f} ({figure['best_ms']:.1f})" if figure else f"{'-':>20}")
            print(f"  {case:18}" + "".join(f"{cell:>20}" for cell in cells))
        for name, value in day["ratios"].items():
            print(f"  {name}: {value}")
        print(f"  siltlake catalog statements per read: {day['statements']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--catalog", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--partitions", type=int, default=1000, help="days of the table read against the peers")
    parser.add_argument(
        "--statement-sizes",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[10, 100],
        help="smaller tables whose catalog statements per read are counted too",
    )
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "read")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "read.json")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    import deltalake
    import pyiceberg

    report: dict = {
        "benchmark": "read",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": {**machine(), "deltalake": deltalake.__version__, "pyiceberg": pyiceberg.__version__},
        "load_avg_1m_start": load_avg_1m(),
    }
    started = time.perf_counter()
    statements = {}
    for size in args.statement_sizes:
        small = run_size(args.catalog, size, args, with_peers=False)
        statements[size] = {label: small[label]["statements"] for label in ("merged_day", "live_day")}
        print(f"{size:>5} partitions: catalog statements per read {statements[size]}", flush=True)
    record = run_size(args.catalog, args.partitions, args, with_peers=True)
    statements[args.partitions] = {label: record[label]["statements"] for label in ("merged_day", "live_day")}
    print(f"{args.partitions:>5} partitions: catalog statements per read {statements[args.partitions]}")
    report["statements_per_read"] = statements
    report["constant_statements"] = len({str(v) for v in statements.values()}) == 1
    report["read"] = record
    print_table(record)
    print(f"\ncatalog statements per read independent of the partitions: {report['constant_statements']}")
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["load_avg_1m_end"] = load_avg_1m()
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

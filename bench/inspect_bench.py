#!/usr/bin/env python
"""Inspection benchmark: file and partition statistics of a 1,000-partition table through siltlake, delta-rs
and PyIceberg, over the same files.

The table is bench/read_bench.py's (bench/publish_bench.py's reader_table: half the days merged and switched,
half live with one object not yet published), registered without copying in a Delta table whose adds carry
each file's row count and event time range as statistics, and in a PyIceberg table (add_files reads the
footers once, at registration). Each case runs once to warm, then --repeats times interleaved; best and
median:

  siltlake   files: Table.files() (no statistics); file_stats: Table.data_files() (the catalog's for small
             objects, Parquet footers for merged ones); partitions: Table.partitions();
  delta-rs   file_stats: DeltaTable(root).get_add_actions(flatten=True); partitions: the same grouped by dt;
  PyIceberg  file_stats: load_table().inspect.files(); partitions: load_table().inspect.partitions().

Every case's total rows must agree. Run from the repository root:  .venv/bin/python bench/inspect_bench.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from common import ROOT, catalog_url, load_avg_1m, machine, new_deployment, write_report
from publish_bench import reader_table
from read_bench import delta_table_over, iceberg_table_over, measure

from siltlake.lake import Lake


def cases(table, delta_root: str, load_iceberg) -> dict:  # a Table and a loader
    from deltalake import DeltaTable

    def delta_actions() -> pa.Table:  # deltalake 1.x answers in arro3: read as pyarrow (no copy)
        return pa.table(DeltaTable(delta_root).get_add_actions(flatten=True))

    def delta_partitions() -> int:
        actions = delta_actions()
        grouped = actions.group_by("partition.dt").aggregate([("num_records", "sum"), ("size_bytes", "sum")])
        return pc.sum(grouped.column("num_records_sum")).as_py()

    return {
        "siltlake": {
            "files": lambda: len(table.files()),
            "file_stats": lambda: sum(f.rows for f in table.data_files()),
            "partitions": lambda: pc.sum(table.partitions().column("rows")).as_py(),
        },
        "delta_rs": {
            "file_stats": lambda: pc.sum(delta_actions().column("num_records")).as_py(),
            "partitions": delta_partitions,
        },
        "pyiceberg": {
            "file_stats": lambda: pc.sum(load_iceberg().inspect.files().column("record_count")).as_py(),
            "partitions": lambda: pc.sum(load_iceberg().inspect.partitions().column("record_count")).as_py(),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--catalog", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "inspect")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "inspect.json")
    args = parser.parse_args(argv)
    import deltalake
    import pyiceberg

    report: dict = {
        "benchmark": "inspect",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": {**machine(), "deltalake": deltalake.__version__, "pyiceberg": pyiceberg.__version__},
        "load_avg_1m_start": load_avg_1m(),
    }
    started = time.perf_counter()
    root = args.workdir / f"inspect-{args.catalog}-{args.partitions}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    with catalog_url(args.catalog, root) as url:
        deployment = new_deployment("ibench01", root, catalog_url=url)
        try:
            state = reader_table(deployment, args.partitions)
            del state["table"]
            table = Lake(deployment).table("bench.t")
            delta_root = delta_table_over(
                table, Path(deployment.lake.path(table.record.layout(deployment.instance_key).prefix)), stats=True
            )
            load_iceberg = iceberg_table_over(table, root / "iceberg")
            figures = measure(cases(table, delta_root, load_iceberg), args.repeats)
        finally:
            deployment.close()
    rows = {
        f"{name} {case}": figure["result"]
        for name, by_case in figures.items()
        for case, figure in by_case.items()
        if case != "files"
    }
    if len(set(rows.values())) != 1:
        raise RuntimeError(f"the cases disagree on the table's rows: {rows}")
    report.update(
        partitions=args.partitions,
        files=figures["siltlake"]["files"]["result"],
        rows=rows,
        **state,
        figures=figures,
        ratios={
            f"siltlake/{peer} {case}": round(
                figures["siltlake"][case]["median_ms"] / figures[peer][case]["median_ms"], 2
            )
            for peer in ("delta_rs", "pyiceberg")
            for case in ("file_stats", "partitions")
        },
        seconds=round(time.perf_counter() - started, 1),
        load_avg_1m_end=load_avg_1m(),
    )
    print(f"{args.partitions} partitions, {report['files']} files; median ms (best)")
    for name, by_case in figures.items():
        for case, figure in by_case.items():
            print(f"  {name:10} {case:12} {figure['median_ms']:>10.1f} ({figure['best_ms']:.1f})")
    for name, value in report["ratios"].items():
        print(f"  {name}: {value}")
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

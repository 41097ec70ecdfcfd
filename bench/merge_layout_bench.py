#!/usr/bin/env python
"""Row-group layout of merged objects: DuckDB queries over siltlake's merged day against delta-rs's compacted day.

One day of small objects (the compact input of merge_bench.py: 2,000 objects of 500 rows, 1 M rows) is merged
once by each layout, untimed:

  delta           delta-rs optimize.compact() of a Delta table holding the same files (one file, its defaults);
  silt_<n>MiB     siltlake's merge task (run_merge_task, deep) with the table's row_group_bytes = n MiB;
  <variant>_<n>MiB silt_<n>MiB's rows and row groups rewritten by pyarrow: dict_all, a dictionary for every
                  column (the merge's writer before it chose dictionary columns); page_index, with the page
                  index; bloom_host, with a bloom filter on host (--variant-sizes picks the sizes).

Timed, in interleaved rounds (one run of every layout and query per round; medians), DuckDB (in process, its
default threads) over read_parquet of each layout's files:

  day_host   a full-day scan with a string equality filter: WHERE host = '...' GROUP BY status;
  day_path   a full-day scan with a string prefix filter: WHERE path LIKE '/api/v2/orders/1%';
  hour       a one-hour time-range query: WHERE time in one hour GROUP BY status;
  hour_host  the same hour with the host filter.

    .venv/bin/python bench/merge_layout_bench.py --sizes 4,8,16,32 --repeats 9
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from common import MIB, RESULTS, ROOT, args_record, load_avg_1m, machine, utc_stamp, warm_page_cache, write_report
from inputs import CODEC, DAY_START_US, object_paths, prepare_log_objects
from merge_bench import bare_task, delta_peer, run_bare

from siltlake.storage.filesystem import Storage

HOUR_START = dt.datetime.fromtimestamp(DAY_START_US / 1e6, dt.UTC) + dt.timedelta(hours=11, minutes=17)
HOST = "web07.tokyo.example.net"
QUERIES = {
    "day_host": f"SELECT status, count(*), round(avg(latency_ms), 3) FROM {{files}} WHERE host = '{HOST}' "
    "GROUP BY status",
    "day_path": "SELECT count(*), count(DISTINCT user_id) FROM {files} WHERE path LIKE '/api/v2/orders/1%'",
    "hour": "SELECT status, count(*), round(avg(latency_ms), 3) FROM {files} "
    "WHERE time >= TIMESTAMPTZ '{start}' AND time < TIMESTAMPTZ '{end}' GROUP BY status",
    "hour_host": f"SELECT status, count(*) FROM {{files}} WHERE host = '{HOST}' "
    "AND time >= TIMESTAMPTZ '{start}' AND time < TIMESTAMPTZ '{end}' GROUP BY status",
}


def layout_summary(paths: list[Path]) -> dict:
    footers = [pq.read_metadata(p) for p in paths]
    groups = [f.row_group(i).num_rows for f in footers for i in range(f.num_row_groups)]
    return {
        "files": len(paths),
        "bytes": sum(p.stat().st_size for p in paths),
        "row_groups": len(groups),
        "rows": sum(groups),
        "largest_row_group_rows": max(groups),
    }


def make_layouts(args, workdir: Path) -> dict[str, list[Path]]:
    data = prepare_log_objects(workdir, "compact", args.objects, args.rows_per_object, args.seed, chronological=False)
    files = object_paths(data)
    warm_page_cache(files)
    out = workdir / "out" / "layout"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    layouts: dict[str, list[Path]] = {}

    prepare, compact = delta_peer(data, workdir)
    prepare(0)
    compact(None)
    from deltalake import DeltaTable

    delta_dir = workdir / "out" / "compact" / "delta"
    layouts["delta"] = [Path(uri.removeprefix("file://")) for uri in DeltaTable(str(delta_dir)).file_uris()]

    lake = Storage(str(workdir))
    keys = [str(p.relative_to(workdir)) for p in files]
    for size in args.sizes:
        key = f"out/layout/silt-{size}mib.parquet"
        run_bare(bare_task(lake, keys, data["total_bytes"], key, "deep", row_group_bytes=int(size * MIB)))
        layouts[f"silt_{size:g}MiB"] = [workdir / key]
        if size not in args.variant_sizes:
            continue
        merged = pq.ParquetFile(workdir / key)
        first = merged.metadata.row_group(0)
        dictionary = [
            first.column(i).path_in_schema for i in range(first.num_columns) if first.column(i).has_dictionary_page
        ]
        variants = {
            "dict_all": {"use_dictionary": True},
            "page_index": {"use_dictionary": dictionary, "write_page_index": True},
            "bloom_host": {"use_dictionary": dictionary, "bloom_filter_options": {"host": {"ndv": 64}}},
        }
        for variant, options in variants.items():
            target = out / f"{variant}-{size:g}mib.parquet"
            with pq.ParquetWriter(target, merged.schema_arrow, compression=CODEC, **options) as writer:
                for index in range(merged.metadata.num_row_groups):
                    writer.write_table(merged.read_row_group(index))
            layouts[f"{variant}_{size:g}MiB"] = [target]
    return layouts


def run_queries(layouts: dict[str, list[Path]], repeats: int, threads: int | None) -> dict:
    import duckdb

    connection = duckdb.connect()
    if threads:
        connection.execute(f"SET threads = {threads}")
    start = HOUR_START.strftime("%Y-%m-%d %H:%M:%S+00")
    end = (HOUR_START + dt.timedelta(hours=1)).strftime("%Y-%m-%d %H:%M:%S+00")
    sql = {
        (layout, name): query.format(
            files="read_parquet([" + ", ".join(f"'{p}'" for p in paths) + "])", start=start, end=end
        )
        for layout, paths in layouts.items()
        for name, query in QUERIES.items()
    }
    answers = {key: sorted(connection.execute(text).fetchall()) for key, text in sql.items()}  # warm, untimed
    for name in QUERIES:
        first = answers[(next(iter(layouts)), name)]
        for layout in layouts:
            if answers[(layout, name)] != first:
                raise RuntimeError(f"{layout} answers {name} differently from {next(iter(layouts))}")
    seconds: dict = {key: [] for key in sql}
    loads = []
    for _ in range(repeats):
        loads.append(load_avg_1m())
        for key, text in sql.items():
            started = time.perf_counter()
            connection.execute(text).fetchall()
            seconds[key].append(time.perf_counter() - started)
    medians = {
        f"{layout}/{name}": round(statistics.median(values) * 1000, 2) for (layout, name), values in seconds.items()
    }
    ratios = {
        f"{layout}/{name}": round(medians[f"{layout}/{name}"] / medians[f"delta/{name}"], 3)
        for (layout, name) in seconds
        if layout != "delta"
    }
    threads_used = connection.execute("SELECT current_setting('threads')").fetchone()[0]
    return {
        "median_ms": medians,
        "over_delta": ratios,
        "load_1m": loads,
        "duckdb": duckdb.__version__,
        "threads": threads_used,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "merge")
    parser.add_argument("--out", type=Path, default=RESULTS / "merge_layout.json")
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--rows-per-object", type=int, default=500)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--sizes", default="4,8,16,32", help="row_group_bytes values to merge with, in MiB")
    parser.add_argument("--variant-sizes", default="", help="sizes also rewritten as the pyarrow variants")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads (its default: the cores)")
    args = parser.parse_args(argv)
    args.sizes = [float(s) for s in args.sizes.split(",") if s]
    args.variant_sizes = [float(s) for s in args.variant_sizes.split(",") if s]
    workdir = args.workdir.resolve()
    report = {"started_at": utc_stamp(), "machine": machine(), "args": args_record(args)}
    layouts = make_layouts(args, workdir)
    report["layouts"] = {name: layout_summary(paths) for name, paths in layouts.items()}
    for name, summary in report["layouts"].items():
        print(f"{name:18} {summary}", flush=True)
    report.update(run_queries(layouts, args.repeats, args.threads))
    report["finished_at"] = utc_stamp()
    print(f"{'layout':18} " + " ".join(f"{q:>16}" for q in QUERIES))
    for layout in layouts:
        cells = []
        for query in QUERIES:
            key = f"{layout}/{query}"
            ratio = report["over_delta"].get(key)
            cells.append(f"{report['median_ms'][key]:>8.1f}" + (f" ({ratio:.2f}x)" if ratio else " " * 8))
        print(f"{layout:18} " + " ".join(cells))
    print(f"load (1 min) during the rounds: {min(report['load_1m']):.1f}-{max(report['load_1m']):.1f}")
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Backlog benchmark: a backlog of many small objects in one round against the same objects arriving wave by wave,
and what grouping small objects (stream.group_bytes) gives the stream and the readers before any merge.

For the same generated gzip JSON-lines objects (bench/inputs.py, cached under --workdir), each in a fresh
deployment (SQLite catalog, local lake), interleaved, medians of --rounds:

  backlog      every object staged, then one stream_once: the waves of a backlog (stream.wave_engine "auto":
               this host's worker processes, as spark.master is local);
  waves        the objects staged one wave at a time (stream.objects_per_wave), stream_once after each: the
               same work as it arrives in waves on the host path; the sum of the rounds;
  ungrouped    the backlog with stream.group_bytes = 0 (one object per staging object and date: the old layout);
  spark        (--spark) the backlog with stream.wave_engine = "spark": every wave over in_driver_bytes (16 MiB) a
               Spark stage, on a session started before the clock (a running daemon's). Waves of 512 small objects
               stay under it and run on the host (as this mode's runs before 2026-12-07 did, unnoticed): give
               --objects-per-wave enough objects to pass it (4096 x 5 KB); the run fails when no wave did.
  cluster      (--cluster) the same on a Spark standalone cluster started on this host (siltlake.standalone: a
               master and two workers of one core each, one executor per worker): the cores Spark adds on a real
               cluster, here the host's own two, so its stage compares per core with the host's workers.

Each mode also reports the live files per partition and DuckDB reading them (count and a full scan).

Run from the repository root:  .venv/bin/python bench/backlog_bench.py [--objects 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import time
from pathlib import Path

from common import RESULTS, ROOT, args_record, load_avg_1m, machine, new_deployment, utc_stamp, write_report
from inputs import input_files, prepare_jsonl_objects
from stream_bench import TABLE_TOML

MODES = ("backlog", "waves", "ungrouped")


def _deployment(workdir: Path, staging: Path, stream: dict):
    from siltlake.tabledef import load_table_file

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / "web_access.toml").write_text(TABLE_TOML)
    deployment = new_deployment("bench0001", workdir, staging_root=staging, stream=stream)
    deployment.catalog.tables.create(load_table_file(workdir / "web_access.toml"))
    return deployment


def _link(files: list[Path], source_root: Path, staging: Path) -> None:
    for path in files:
        target = staging / path.relative_to(source_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, target)


def _readers(deployment) -> dict:
    """Live files per partition, and DuckDB counting and scanning them."""
    import duckdb

    files = sorted(
        str(Path(deployment.lake.path(info.key)))
        for info in deployment.lake.list()
        if ("/live/" in info.key or "/delayed/" in info.key) and info.key.endswith(".parquet")
    )
    partitions = {Path(name).parent for name in files}
    connection = duckdb.connect()
    started = time.perf_counter()
    count = connection.execute(f"select count(*) from read_parquet({files!r})").fetchone()
    counted = time.perf_counter() - started
    started = time.perf_counter()
    connection.execute(f"select sum(length(path)), max(status) from read_parquet({files!r})").fetchall()
    scanned = time.perf_counter() - started
    return {
        "small_files": len(files),
        "files_per_partition": round(len(files) / max(1, len(partitions)), 1),
        "rows": count[0] if count else 0,
        "duckdb_count_s": round(counted, 3),
        "duckdb_scan_s": round(scanned, 3),
    }


def run_mode(
    mode: str,
    files: list[Path],
    source_root: Path,
    workdir: Path,
    per_wave: int,
    sessions: dict,
    in_driver: int | None = None,
) -> dict:
    from siltlake.stream import stream_once

    stream: dict = {"group_bytes": 0} if mode == "ungrouped" else {}
    if mode in ("spark", "cluster"):  # every wave over in_driver_bytes a Spark stage (checked below)
        stream = {"wave_engine": "spark"} | ({"in_driver_bytes": in_driver} if in_driver is not None else {})
    stream["objects_per_wave"] = per_wave
    staging = workdir / "staging"
    deployment = _deployment(workdir / "deployment", staging, stream)
    if mode in sessions:
        deployment.use_spark(sessions[mode])
    try:
        seconds, processed, records, host_waves, spark_waves = 0.0, 0, 0, 0, 0
        chunks = [files[i : i + per_wave] for i in range(0, len(files), per_wave)] if mode == "waves" else [files]
        for chunk in chunks:
            _link(chunk, source_root, staging)
            started = time.perf_counter()
            report = stream_once(deployment)
            seconds += time.perf_counter() - started
            if report.failed or report.unknown:
                raise RuntimeError(f"{mode}: {report.failed or report.unknown}")
            processed += report.processed
            records += report.records_loaded
            host_waves += report.local_waves
            spark_waves += report.waves - report.local_waves
        if processed != len(files):
            raise RuntimeError(f"{mode}: processed {processed} of {len(files)} objects")
        readers = _readers(deployment)
        if readers["rows"] != records:
            raise RuntimeError(f"{mode}: readers see {readers['rows']} rows of {records}")
        if mode in ("spark", "cluster") and not spark_waves:
            raise RuntimeError(
                f"{mode}: every wave ran on the host, none as a Spark stage (each under stream.in_driver_bytes): "
                "give --objects-per-wave more objects"
            )
        return {
            "mode": mode,
            "seconds": seconds,
            "records": records,
            "host_waves": host_waves,
            "spark_waves": spark_waves,
            **readers,
        }
    finally:
        deployment.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--object-bytes", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spark", action="store_true", help="also the backlog as Spark stages (wave_engine spark)")
    parser.add_argument(
        "--cluster", action="store_true", help="also the backlog as Spark stages on a standalone cluster on this host"
    )
    parser.add_argument("--objects-per-wave", type=int, default=0, help="stream.objects_per_wave (default: its own)")
    parser.add_argument(
        "--in-driver-bytes",
        type=int,
        default=None,
        help="the spark and cluster modes' stream.in_driver_bytes (0: every wave a stage)",
    )
    parser.add_argument("--modes", default="", help=f"comma-separated modes to run (default: {', '.join(MODES)})")
    parser.add_argument("--workdir", type=Path, default=ROOT / ".bench" / "backlog")
    parser.add_argument("--out", type=Path, default=RESULTS / "backlog.json")
    args = parser.parse_args()
    if args.spark and args.cluster:
        parser.error("--spark and --cluster: one at a time (a process has one Spark session)")
    data = prepare_jsonl_objects(args.workdir, args.objects, args.object_bytes, seed=7, level=6)
    source_root = Path(data["staging_root"])
    files = input_files(source_root)
    modes = tuple(mode for mode in args.modes.split(",") if mode) or MODES
    modes += ("spark",) * args.spark + ("cluster",) * args.cluster
    with contextlib.ExitStack() as stack:
        sessions = _sessions(args, stack)
        _run(args, data, files, source_root, modes, sessions)


def _sessions(args, stack: contextlib.ExitStack) -> dict:
    """The Spark sessions the modes run on, started before the clock (a running daemon's)."""
    from common import start_spark

    sessions = {}
    if args.spark:
        sessions["spark"], _ = start_spark("backlog-bench")
    if args.cluster:
        from siltlake.demo.cluster import CLUSTER_CONF
        from siltlake.standalone import standalone_cluster

        cluster = stack.enter_context(standalone_cluster(args.workdir / "cluster", workers=2, cores=1, memory="1g"))
        sessions["cluster"], seconds = start_spark("backlog-bench", CLUSTER_CONF, master=cluster.master_url)
        print(f"cluster {cluster.master_url}: session in {seconds} s", flush=True)
    return sessions


def _run(args, data: dict, files: list[Path], source_root: Path, modes: tuple[str, ...], sessions: dict) -> None:
    from siltlake.streamconfig import StreamConfig

    per_wave = args.objects_per_wave or StreamConfig().objects_per_wave
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    loads = []
    for round_number in range(args.rounds):
        for mode in modes:
            loads.append(load_avg_1m())
            result = run_mode(mode, files, source_root, args.workdir / "run", per_wave, sessions, args.in_driver_bytes)
            runs[mode].append(result)
            print(
                f"round {round_number + 1} {mode}: {result['seconds']:.2f} s, {result['small_files']} files, "
                f"waves: {result['host_waves']} on the host, {result['spark_waves']} as Spark stages",
                flush=True,
            )
    medians = {
        mode: {
            "seconds": round(statistics.median(r["seconds"] for r in results), 2),
            "files_per_partition": results[-1]["files_per_partition"],
            "duckdb_count_s": round(statistics.median(r["duckdb_count_s"] for r in results), 3),
            "duckdb_scan_s": round(statistics.median(r["duckdb_scan_s"] for r in results), 3),
        }
        for mode, results in runs.items()
    }
    first = "waves" if "waves" in medians else modes[0]
    base = medians[first]["seconds"]
    print(f"\n{len(files):,} objects, {data['bytes'] / 1e6:.1f} MB, load {min(loads):.1f}-{max(loads):.1f}")
    print(f"| mode | stream s | vs {first} | small files / partition | DuckDB count s | DuckDB scan s |")
    print("|---|---:|---:|---:|---:|---:|")
    for mode, row in medians.items():
        print(
            f"| {mode} | {row['seconds']:.2f} | {row['seconds'] / base:.2f}x | {row['files_per_partition']:,} "
            f"| {row['duckdb_count_s']:.3f} | {row['duckdb_scan_s']:.3f} |"
        )
    write_report(
        args.out,
        {
            "bench": "backlog",
            "time": utc_stamp(),
            "machine": machine(),
            "args": args_record(args),
            "load": [min(loads), max(loads)],
            "medians": medians,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()

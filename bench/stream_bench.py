#!/usr/bin/env python
"""Stream ingest benchmark: siltlake against a pyarrow floor and a naive Spark job, same files, one run.

Default mode: ``--objects`` gzip JSON-lines objects of about ``--object-bytes`` compressed each
(generated once and cached under ``--workdir``) are turned into date-partitioned (Asia/Tokyo)
zstd Parquet by

  floor     pyarrow only, no catalog: read_json with the table's explicit schema on a gzip input
            stream, one Parquet file per partition date each object touches, thread pool of 2;
  spark     naive Spark: spark.read.json(files) (explicit schema unless --spark-infer-schema),
            add dt, write.partitionBy("dt").parquet(...), local[2];
  siltlake  bench_entry(staging_root, workdir) below: a real deployment, `stream_once`.

Big-object mode (``--big-object-mb N``): one gzip JSON-lines object of about N MB compressed,
streamed to disk; measures bench_big_object(path, workdir) below (peak task memory) and,
for reference, a streaming pyarrow floor in a child process (its peak RSS).

Run from the repository root:  .venv/bin/python bench/stream_bench.py
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq
from common import (
    MB,
    RESULTS,
    ROOT,
    Measure,
    args_record,
    machine,
    new_deployment,
    start_spark,
    utc_stamp,
    warm_page_cache,
    write_report,
)
from inputs import input_files, prepare_big_object, prepare_jsonl_objects

from siltlake.demo.sample import TABLE_TOML
from siltlake.tabledef import TableDef

TABLE = TableDef.from_mapping(tomllib.loads(TABLE_TOML), source="demo table")
SPARK_TYPES = {
    "timestamp": "TIMESTAMP",
    "string": "STRING",
    "bigint": "BIGINT",
    "int": "INT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "json": "STRING",
}


def output_stats(directory: Path) -> dict:
    """Rows, files and bytes of a Parquet output tree, from the footers only."""
    files = sorted(directory.rglob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return {
        "rows_written": rows,
        "files_written": len(files),
        "output_bytes": sum(f.stat().st_size for f in files),
        "partitions": sorted({f.parent.name for f in files if f.parent.name.startswith("dt=")}),
    }


def null_times(directory: Path) -> int:
    """Rows whose time came out null (a time the peer failed to parse)."""
    nulls = 0
    for path in directory.rglob("*.parquet"):
        metadata = pq.ParquetFile(path).metadata
        index = metadata.schema.to_arrow_schema().get_field_index(TABLE.time_column)
        for group in range(metadata.num_row_groups):
            statistics = metadata.row_group(group).column(index).statistics
            nulls += statistics.null_count if statistics is not None and statistics.has_null_count else 0
    return nulls


def figures(name: str, measured: Measure, records: int, input_bytes: int, **extra) -> dict:
    seconds = measured.seconds
    return {
        "peer": name,
        "status": "ok",
        "seconds": round(seconds, 3),
        "records": records,
        "records_per_s": round(records / seconds) if seconds else None,
        "mb_per_s": round(input_bytes / MB / seconds, 2) if seconds else None,
        **measured.extra(),
        **extra,
    }


# --------------------------------------------------------------------------------------------------
# (a) the floor: pyarrow only


def read_schema() -> pa.Schema:
    """The JSON fields as they arrive (source names), with the table's Arrow types."""
    return pa.schema([pa.field(c.source_field, c.arrow_field().type) for c in TABLE.columns])


def partition_dates(times: pa.ChunkedArray | pa.Array) -> pa.Array:
    local = pc.local_timestamp(times.cast(pa.timestamp("us", tz=TABLE.timezone)))
    return local.cast(pa.date32())


def read_object(path: Path, schema: pa.Schema, use_threads: bool) -> pa.Table:
    """One gzip JSON-lines object with the table's explicit schema, columns under the table's names."""
    with pa.input_stream(str(path), compression="gzip") as stream:
        table = pj.read_json(
            stream,
            read_options=pj.ReadOptions(use_threads=use_threads, block_size=4 << 20),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    return table.rename_columns([c.name for c in TABLE.columns])


def floor_one(path: Path, index: int, out: Path, schema: pa.Schema, use_threads: bool) -> int:
    table = read_object(path, schema, use_threads)
    dates = partition_dates(table[TABLE.time_column])
    distinct = pc.unique(dates).to_pylist()
    for day in distinct:
        part = table if len(distinct) == 1 else table.filter(pc.equal(dates, pa.scalar(day, pa.date32())))
        directory = out / f"dt={day.isoformat()}"
        directory.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, directory / f"part-{index:05d}.parquet", compression="zstd")
    return table.num_rows


def run_floor(files: list[Path], out: Path, input_bytes: int, workers: int = 2) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    schema = read_schema()
    with Measure() as measured, ThreadPoolExecutor(workers) as executor:
        jobs = [executor.submit(floor_one, path, i, out, schema, False) for i, path in enumerate(files)]
        rows = sum(job.result() for job in jobs)
    return figures(
        f"floor (pyarrow, {workers} threads)",
        measured,
        rows,
        input_bytes,
        **output_stats(out),
        null_times=null_times(out),
    )


# --------------------------------------------------------------------------------------------------
# (b) naive Spark


def spark_conf(workdir: Path, driver_memory: str) -> dict[str, str]:
    """The run's one session (local[2]): zstd Parquet like the other peers, temporary files in workdir."""
    return {
        "spark.driver.memory": driver_memory,
        "spark.sql.parquet.compression.codec": "zstd",
        "spark.sql.sources.partitionOverwriteMode": "static",
        "spark.local.dir": str(workdir / "spark-tmp"),
    }


def spark_ddl() -> str:
    return ", ".join(f"`{c.source_field}` {SPARK_TYPES[c.type]}" for c in TABLE.columns)


def spark_job(spark, files: list[Path], out: Path, infer_schema: bool) -> None:
    from pyspark.sql import functions as F

    reader = spark.read if infer_schema else spark.read.schema(spark_ddl())
    frame = reader.json([str(f) for f in files])
    for column in TABLE.columns:
        if column.source_field != column.name:
            frame = frame.withColumnRenamed(column.source_field, column.name)
    frame = frame.withColumn(
        "dt", F.date_format(F.from_utc_timestamp(F.col(TABLE.time_column), TABLE.timezone), "yyyy-MM-dd")
    )
    frame.write.mode("overwrite").partitionBy("dt").parquet(str(out))


def run_spark(spark, files: list[Path], out: Path, input_bytes: int, infer_schema: bool, warmup: bool) -> dict:
    if warmup:  # let the JVM load classes and JIT the JSON path before the clock starts
        spark_job(spark, files[:2], out.parent / "spark-warmup", infer_schema)
        shutil.rmtree(out.parent / "spark-warmup", ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    with Measure() as measured:
        spark_job(spark, files, out, infer_schema)
    stats = output_stats(out)
    name = "naive spark (local[2], " + ("inferred schema)" if infer_schema else "explicit schema)")
    return figures(
        name, measured, stats["rows_written"], input_bytes, **stats, null_times=null_times(out), warmup=warmup
    )


# --------------------------------------------------------------------------------------------------
# (c) siltlake


def _deployment(workdir: Path, staging_root: Path):
    """A fresh siltlake deployment in workdir (SQLite catalog, local lake) on the bench's SparkSession."""
    from pyspark.sql import SparkSession

    from siltlake.tabledef import load_table_file

    deployment = new_deployment("bench0001", workdir, staging_root=staging_root)
    deployment.use_spark(SparkSession.builder.getOrCreate())
    deployment.catalog.tables.create(load_table_file(workdir / "web_access.toml"))
    return deployment


def _stream(deployment) -> dict:
    from siltlake.stream import stream_once

    report = stream_once(deployment)
    if report.failed or report.unknown:
        raise RuntimeError(f"siltlake failed on {report.failed or report.unknown}")
    return {
        "records": report.records_loaded,
        "staging_objects": report.processed,
        "small_objects": report.live_objects + report.delayed_objects,
        "bad_records": report.bad_records,
        "bytes_written": report.bytes_written,
        "stream_seconds": round(report.seconds, 2),
        "peak_task_memory_bytes": report.peak_task_rss_bytes,
    }


def bench_entry(staging_root: str, workdir: str) -> dict:
    """siltlake stream --once over the staging root: discovery, Spark tasks, catalog commits."""
    deployment = _deployment(Path(workdir), Path(staging_root))
    try:
        return _stream(deployment)
    finally:
        deployment.close()


def bench_big_object(path: str, workdir: str) -> dict:
    """The same over one huge object, linked into a staging root under a key the default pattern maps."""
    staging = Path(workdir) / "staging"
    target = staging / "fluentd01.web.access" / "2026" / "11" / "20" / "big.jsonl.gz"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, target)
    except OSError:
        target.symlink_to(Path(path).resolve())
    deployment = _deployment(Path(workdir), staging)
    try:
        return _stream(deployment)
    finally:
        deployment.close()


def run_siltlake(entry, source: str | Path, workdir: str | Path, input_bytes: int, records: int) -> dict:
    """Measure entry(source, workdir): bench_entry over a staging root, or bench_big_object over one file."""
    workdir = Path(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    (workdir / "web_access.toml").write_text(TABLE_TOML)
    try:
        with Measure() as measured:
            details = entry(str(source), str(workdir))
    except Exception as exc:  # report and keep the peers' figures
        return {"peer": "siltlake", "status": "failed", "message": f"{type(exc).__name__}: {exc}"}
    return figures("siltlake", measured, details.get("records", records), input_bytes, details=details)


def big_floor_child(path: str, out: str) -> dict:
    """Streaming pyarrow floor for one huge object (run in a fresh process to measure its peak RSS)."""
    schema = read_schema()
    writers: dict = {}
    rows = 0
    started = time.perf_counter()
    with pa.input_stream(path, compression="gzip") as stream:
        reader = pj.open_json(
            stream,
            read_options=pj.ReadOptions(block_size=16 << 20),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
        names = [c.name for c in TABLE.columns]
        for batch in reader:
            batch = pa.RecordBatch.from_arrays(batch.columns, names=names)
            dates = partition_dates(batch.column(TABLE.time_column))
            for day in pc.unique(dates).to_pylist():
                part = batch.filter(pc.equal(dates, pa.scalar(day, pa.date32())))
                if day not in writers:
                    directory = Path(out) / f"dt={day.isoformat()}"
                    directory.mkdir(parents=True, exist_ok=True)
                    writers[day] = pq.ParquetWriter(directory / "part-00000.parquet", batch.schema, compression="zstd")
                writers[day].write_batch(part)
            rows += batch.num_rows
    for writer in writers.values():
        writer.close()
    return {
        "seconds": time.perf_counter() - started,
        "rows": rows,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def run_big_floor(path: str, out: Path, input_bytes: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    with Measure() as measured, multiprocessing.get_context("spawn").Pool(1) as pool:
        result = pool.apply(big_floor_child, (path, str(out)))
    measured.seconds = result["seconds"]  # the child's own run, without spawning and imports
    return figures(
        "floor (pyarrow streaming, 1 process)",
        measured,
        result["rows"],
        input_bytes,
        peak_rss_mb=result["peak_rss_mb"],
        **output_stats(out),
    )


# --------------------------------------------------------------------------------------------------
# reporting


def ratios(results: dict) -> dict:
    silt = results.get("siltlake", {})
    found = {}
    for peer in ("floor", "spark"):
        other = results.get(peer, {})
        if silt.get("status") == "ok" and other.get("status") == "ok":
            found[f"siltlake_time_over_{peer}"] = round(silt["seconds"] / other["seconds"], 3)
            found[f"siltlake_throughput_over_{peer}"] = round(silt["records_per_s"] / other["records_per_s"], 3)
    return found


def print_table(results: dict, found: dict) -> None:
    header = f"{'peer':44} {'seconds':>9} {'cpu s':>8} {'records':>12} {'records/s':>11} {'MB/s':>8} {'files':>6}"
    print()
    print(header)
    print("-" * len(header))
    for result in results.values():
        if result.get("status") != "ok":
            print(f"{result['peer']:44} {result['status']}: {result.get('message', '')}")
            continue
        files = result.get("files_written", "")
        print(
            f"{result['peer']:44} {result['seconds']:>9.2f} {result['cpu_seconds']:>8.1f} "
            f"{result['records']:>12,} {result['records_per_s']:>11,} {result['mb_per_s']:>8.2f} "
            f"{files!s:>6}"
        )
        keys = ("peak_rss_mb", "peak_tree_rss_mb", "null_times", "load_avg_1m_before", "load_avg_1m_after")
        extra = {k: result[k] for k in keys if k in result}
        if extra:
            print(f"{'':44} {extra}")
    for name, value in found.items():
        print(f"{name}: {value}")
    print()


def run_big_mode(peers: set[str], workdir: Path, data: dict, results: dict, repeat: int = 1) -> None:
    """The floor and siltlake over the one big object, `repeat` times each, interleaved (the order alternates from
    one repetition to the next, so that a change in the machine's load falls on both); medians."""
    warm_page_cache([Path(data["path"])])
    runs: dict[str, list[dict]] = {peer: [] for peer in ("floor", "siltlake") if peer in peers}
    for rep in range(repeat):
        order = list(runs) if rep % 2 == 0 else list(reversed(runs))
        for peer in order:
            print(f"running {peer} ({rep + 1}/{repeat}) ...", flush=True)
            if peer == "floor":
                runs[peer].append(run_big_floor(data["path"], workdir / "out" / "big-floor", data["bytes"]))
            else:
                runs[peer].append(
                    run_siltlake(
                        bench_big_object, data["path"], workdir / "siltlake-big", data["bytes"], data["records"]
                    )
                )
            print(f"  {peer}: {runs[peer][-1]}", flush=True)
    for peer, found in runs.items():
        ok = [run for run in found if run.get("status") == "ok"]
        if not ok:
            results[peer] = found[-1]
            continue
        middle = sorted(ok, key=lambda run: run["seconds"])[(len(ok) - 1) // 2]
        results[peer] = {
            **middle,
            "median_seconds": statistics.median(run["seconds"] for run in ok),
            "all_seconds": [run["seconds"] for run in ok],
            "all_loads": [(run.get("load_avg_1m_before"), run.get("load_avg_1m_after")) for run in ok],
            "all_peak_mb": [
                run.get("peak_rss_mb") or round(run.get("details", {}).get("peak_task_memory_bytes", 0) / MB, 1)
                for run in ok
            ],
        }
        results[peer]["seconds"] = results[peer]["median_seconds"]


def run_stream_mode(args, peers: set[str], workdir: Path, data: dict, results: dict, spark) -> None:
    files = input_files(data["staging_root"])
    if len(files) != args.objects:
        raise SystemExit(f"expected {args.objects} input objects, found {len(files)}: delete {workdir / 'input'}")
    warm_page_cache(files)
    if "floor" in peers:
        print("running floor ...", flush=True)
        results["floor"] = run_floor(files, workdir / "out" / "floor", data["bytes"])
    if "spark" in peers:
        print("running naive spark ...", flush=True)
        results["spark"] = run_spark(
            spark, files, workdir / "out" / "spark", data["bytes"], args.spark_infer_schema, not args.no_spark_warmup
        )
    if "siltlake" in peers:
        print("running siltlake ...", flush=True)
        results["siltlake"] = run_siltlake(
            bench_entry, data["staging_root"], workdir / "siltlake", data["bytes"], data["records"]
        )
    for name, result in results.items():
        if result.get("status") == "ok" and result["records"] != data["records"]:
            result["warning"] = f"{name} wrote {result['records']:,} rows, input has {data['records']:,}"
            print(f"WARNING: {result['warning']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=500, help="number of input objects (default 500)")
    parser.add_argument(
        "--object-bytes", type=int, default=1_000_000, help="compressed size of each object, about (default 1000000)"
    )
    parser.add_argument(
        "--workdir", type=Path, default=ROOT / "bench" / "data", help="cached inputs and outputs (default bench/data)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON report (default bench/results/stream.json, or big_object.json)"
    )
    parser.add_argument(
        "--big-object-mb", type=int, default=None, help="big-object mode: one object of about this many MB compressed"
    )
    parser.add_argument(
        "--peers", default="floor,spark,siltlake", help="comma-separated subset of floor,spark,siltlake (default all)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="big-object mode: runs of each peer, interleaved; the report gives medians",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--compresslevel",
        type=int,
        default=6,
        help="gzip level of the generated inputs (6 = what Fluentd and most shippers use)",
    )
    parser.add_argument(
        "--spark-infer-schema",
        action="store_true",
        help="let Spark infer the JSON schema (an extra pass over the input)",
    )
    parser.add_argument("--no-spark-warmup", action="store_true", help="skip Spark's untimed warm-up job")
    parser.add_argument("--spark-driver-memory", default="2g")
    args = parser.parse_args(argv)
    peers = {p.strip() for p in args.peers.split(",") if p.strip()}
    unknown = peers - {"floor", "spark", "siltlake"}
    if unknown:
        parser.error(f"unknown peers: {', '.join(sorted(unknown))}")
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {"started_at": utc_stamp(), "machine": machine(), "args": args_record(args)}
    results: dict = {}

    if args.big_object_mb:
        out = args.out or RESULTS / "big_object.json"
        data = prepare_big_object(workdir, args.big_object_mb, args.seed, args.compresslevel)
        wants_spark = "siltlake" in peers
    else:
        out = args.out or RESULTS / "stream.json"
        data = prepare_jsonl_objects(workdir, args.objects, args.object_bytes, args.seed, args.compresslevel)
        wants_spark = bool(peers & {"spark", "siltlake"})
    report["input"] = data
    spark = None
    if wants_spark:
        # one session for the whole run: the naive job uses it, and siltlake finds it with
        # SparkSession.getActiveSession() / builder.getOrCreate() instead of paying for a JVM start
        print("starting spark ...", flush=True)
        spark, report["spark_session_start_seconds"] = start_spark(
            "siltlake-stream-bench", spark_conf(workdir, args.spark_driver_memory)
        )
    try:
        if args.big_object_mb:
            run_big_mode(peers, workdir, data, results, args.repeat)
        else:
            run_stream_mode(args, peers, workdir, data, results, spark)
    finally:
        if spark is not None:
            spark.stop()

    report["results"] = results
    report["ratios"] = ratios(results)
    report["finished_at"] = utc_stamp()
    print_table(results, report["ratios"])
    write_report(out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Bulk load benchmark: `silt load` against a naive Spark job, same CSV files, one run, one Spark session.

``--files`` CSV files of about ``--mb-per-file`` MB each (generated once and cached under ``--workdir``)
are loaded by

  naive     spark.read.csv(files, header=True, inferSchema=True).write.parquet(...) with zstd: two passes
            over the input (inference, then the read), one Parquet file per Spark partition, no dates,
            no sort, no catalog;
  siltlake  a real deployment (SQLite catalog): `silt guess` writes the config from a sample, then
            `load()` runs one task per file (one Spark stage), writes per-date time-sorted small objects
            and commits them in one transaction.

Both run on local[2] in the same session (started once, warmed up by a tiny job). Each is run
``--repeat`` times; the best wall time counts. Rows/s and MB/s are over the uncompressed input.

Run from the repository root:  .venv/bin/python bench/load_bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from common import MB, ROOT, new_deployment, save_json, start_spark

GENERATOR_VERSION = 1
ACTIONS = np.array(["view", "click", "purchase", "search", "logout"])


def generate(directory: Path, files: int, mb_per_file: int) -> tuple[list[Path], int]:
    """CSV access logs: id, local time (Asia/Tokyo, two days), user, action, path, status, bytes, latency."""
    marker = directory / f"_generated-{GENERATOR_VERSION}-{files}x{mb_per_file}.json"
    paths = [directory / f"access-{index:03d}.csv" for index in range(files)]
    if marker.exists():
        return paths, json.loads(marker.read_text())["rows"]
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rows_per_file = mb_per_file * MB // 82  # about 82 bytes a row
    total = 0
    rng = np.random.default_rng(6)
    start = np.datetime64("2026-11-20T00:00:00", "s")
    for index, path in enumerate(paths):
        first = index * rows_per_file
        ids = np.arange(first, first + rows_per_file, dtype=np.int64)
        seconds = rng.integers(0, 2 * 86400, rows_per_file)
        times = pa.array(start + seconds.astype("timedelta64[s]"), pa.timestamp("s"))
        table = pa.table(
            {
                "id": ids,
                "time": pc.strftime(times, "%Y-%m-%d %H:%M:%S"),
                "user_id": rng.integers(0, 10_000_000, rows_per_file),
                "action": pa.array(ACTIONS[rng.integers(0, len(ACTIONS), rows_per_file)]),
                "path": pc.binary_join_element_wise(
                    "/item/", pc.cast(pa.array(rng.integers(0, 100_000, rows_per_file)), pa.string()), "?ref=home", ""
                ),
                "status": pa.array(rng.choice([200, 200, 200, 200, 301, 404, 500], rows_per_file)),
                "bytes": rng.integers(0, 1_000_000, rows_per_file),
                "latency": np.round(rng.random(rows_per_file), 6),
            }
        )
        pacsv.write_csv(table, path, pacsv.WriteOptions(quoting_style="needed"))
        total += rows_per_file
    marker.write_text(json.dumps({"rows": total}))
    return paths, total


def run_naive(spark, paths: list[Path], out: Path) -> float:  # a SparkSession
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    frame = spark.read.csv([str(p) for p in paths], header=True, inferSchema=True)
    frame.write.option("compression", "zstd").parquet(str(out))
    return time.perf_counter() - started


def run_siltlake(spark, paths: list[Path], workdir: Path) -> tuple[float, dict]:
    from siltlake.load import load, parse_load_config
    from siltlake.load.guess import guess

    deployment_dir = workdir / "deployment"
    shutil.rmtree(deployment_dir, ignore_errors=True)
    deployment = new_deployment("bench001", deployment_dir)
    deployment.use_spark(spark)
    seed = {
        "in": {"path": str(paths[0].parent / "access-*.csv")},
        "out": {"table": "web.access", "create": True, "timezone": "Asia/Tokyo"},
    }
    config = guess(seed)
    started = time.perf_counter()
    report = load(deployment, parse_load_config(config))
    seconds = time.perf_counter() - started
    (job,) = report.jobs
    objects = deployment.catalog.partitions.small_objects(deployment.catalog.tables.get("web.access").id)
    deployment.close()
    return seconds, {
        "records_in": job.records_in,
        "loaded": job.loaded,
        "bad": job.bad,
        "tasks": job.tasks,
        "small_objects": len(objects),
        "parser": config["parser"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--mb-per-file", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/siltlake-load-bench"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "load.json")
    args = parser.parse_args()

    paths, rows = generate(args.workdir / "input", args.files, args.mb_per_file)
    input_bytes = sum(p.stat().st_size for p in paths)
    print(f"input: {len(paths)} CSV files, {input_bytes / MB:,.0f} MB, {rows:,} rows", flush=True)

    spark, _ = start_spark("load-bench")
    spark.range(10).count()  # start the executors before timing
    results: dict[str, dict] = {}
    for name in ("naive", "siltlake"):
        best, extra = None, {}
        for _ in range(args.repeat):
            if name == "naive":
                seconds = run_naive(spark, paths, args.workdir / "naive-out")
            else:
                seconds, extra = run_siltlake(spark, paths, args.workdir)
            best = seconds if best is None else min(best, seconds)
        results[name] = {
            "seconds": round(best, 2),
            "rows_per_second": round(rows / best),
            "mb_per_second": round(input_bytes / MB / best, 1),
            **extra,
        }
        print(f"{name:9s} {best:7.1f} s  {rows / best:12,.0f} rows/s  {input_bytes / MB / best:7.1f} MB/s", flush=True)
    speedup = results["naive"]["seconds"] / results["siltlake"]["seconds"]
    print(f"siltlake / naive speed: {speedup:.2f}x")
    assert results["siltlake"]["loaded"] == rows, results["siltlake"]
    record = {
        "benchmark": "load",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": os.getloadavg(),
        },
        "input": {"files": len(paths), "bytes": input_bytes, "rows": rows},
        "results": results,
        "speedup": round(speedup, 2),
    }
    save_json(args.out, record)
    spark.stop()


if __name__ == "__main__":
    main()

"""Stream and merge on S3 versus local disk: the same staging objects, streamed and merged once into
a lake on local disk and once into a bucket of a local S3 endpoint (moto's server on 127.0.0.1), and the S3
requests per staging object.

Timed runs reach the endpoint directly; one more S3 run goes through the tests' counting proxy (which slows
it) to count requests by method. A local S3 endpoint has no network latency and no request price: the wall
times show siltlake's request pattern and the endpoint's own cost, not AWS's round trips. Per repeat: a fresh
deployment, the staging objects put (not timed), then `stream_once` and `merge_once` timed (the merge with
`merge.in_driver_bytes = 0`, as one Spark stage, and with the default, in the worker's own process).

    .venv/bin/python bench/s3_bench.py                       # 48 objects x 2,000 records, 3 repeats
    .venv/bin/python bench/s3_bench.py --objects 96 --records 4000 --repeats 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from common import RESULTS, load_avg_1m, machine, save_json, start_spark, utc_stamp

os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)  # before Spark starts: its workers inherit them

from siltlake.config import Config  # after the environment is set
from siltlake.deployment import Deployment
from siltlake.merge import merge_once
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef
from tests.s3_server import CountingProxy, MotoS3

TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "utc_event_time",
    "timezone": "UTC",
    "merge_interval": 0,
    "columns": [
        {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
        {"name": "user_id", "type": "bigint"},
        {"name": "action", "type": "string"},
        {"name": "path", "type": "string"},
    ],
}


def staging_objects(count: int, records: int) -> dict[str, bytes]:
    objects = {}
    for n in range(count):
        lines = [
            json.dumps(
                {
                    "time": f"2026-11-20T{(i // 3600) % 24:02d}:{(i // 60) % 60:02d}:{i % 60:02d}Z",
                    "user_id": n * records + i,
                    "action": ("view", "click", "buy")[i % 3],
                    "path": f"/item/{(n * 7919 + i) % 5000}",
                }
            )
            for i in range(records)
        ]
        objects[f"f1.web.access/2026/11/20/obj-{n:04d}.jsonl.gz"] = gzip.compress(("\n".join(lines) + "\n").encode())
    return objects


def deployment_for(
    kind: str, workdir: Path, endpoint: str | None, bucket: str | None, spark, in_driver_bytes: int
) -> Deployment:
    storage: dict = {"root": str(workdir / "lake"), "staging_root": str(workdir / "staging")}
    if kind == "s3":
        storage = {
            "root": f"s3://{bucket}/lake",
            "staging_root": f"s3://{bucket}/staging",
            "s3": {"endpoint_override": endpoint, "scheme": "http"},
        }
    config = Config.model_validate(
        {
            "instance_key": "bench001",
            "catalog": {"url": f"sqlite:///{workdir / 'c.db'}"},
            "storage": storage,
            "spark": {"master": "local[2]"},
            "merge": {"in_driver_bytes": in_driver_bytes},
        }
    )
    deployment = Deployment(config)
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(TABLE))
    return deployment


def one_run(
    kind: str,
    objects: dict[str, bytes],
    spark,
    moto: MotoS3,
    endpoint: str | None,
    in_driver_bytes: int,
    proxy: CountingProxy | None = None,
) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix=f"s3bench-{kind}-"))
    bucket = moto.create_bucket() if kind == "s3" else None
    deployment = deployment_for(kind, workdir, endpoint, bucket, spark, in_driver_bytes)
    try:
        for key, data in objects.items():
            with deployment.staging.open_output(key) as out:
                out.write(data)
        counts = {}
        if proxy:
            proxy.reset()
        started = time.perf_counter()
        streamed = stream_once(deployment)
        stream_seconds = time.perf_counter() - started
        if proxy:
            counts["stream"] = dict(proxy.reset())
        started = time.perf_counter()
        merged = merge_once(deployment)
        merge_seconds = time.perf_counter() - started
        if proxy:
            counts["merge"] = dict(proxy.reset())
        assert streamed.processed == len(objects) and not streamed.failed, streamed
        assert merged.finished >= 1 and not merged.failed, merged
        return {
            "stream_seconds": round(stream_seconds, 3),
            "merge_seconds": round(merge_seconds, 3),
            "records": streamed.records_loaded,
            "merge_stages": merged.stages,
            "merge_in_driver": merged.in_driver,
            **({"requests": counts} if counts else {}),
        }
    finally:
        deployment.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=48)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "s3.json")
    args = parser.parse_args()

    objects = staging_objects(args.objects, args.records)
    moto = MotoS3().start()
    spark, spark_seconds = start_spark("siltlake-s3-bench")
    load_before = load_avg_1m()
    runs: dict[str, list[dict]] = {}
    try:
        one_run("local", objects, spark, moto, None, 0)  # warm-up: Spark's workers, the JIT, the page cache
        for _ in range(args.repeats):  # interleaved, so a change in the machine's load hits both alike
            for kind in ("local", "s3"):
                for merge_where, in_driver_bytes in (("spark", 0), ("in_process", 32 * 1024 * 1024)):
                    runs.setdefault(f"{kind}/{merge_where}", []).append(
                        one_run(kind, objects, spark, moto, moto.endpoint if kind == "s3" else None, in_driver_bytes)
                    )
        proxy = CountingProxy(moto.port)
        counted = one_run("s3", objects, spark, moto, proxy.endpoint, 0, proxy)
        proxy.close()
    finally:
        spark.stop()
        moto.stop()

    def median(name: str, field: str) -> float:
        return round(statistics.median(run[field] for run in runs[name]), 3)

    def stream_median(kind: str) -> float:
        return statistics.median(run["stream_seconds"] for name in runs if name.startswith(kind) for run in runs[name])

    summary = {
        name: {"stream_seconds": median(name, "stream_seconds"), "merge_seconds": median(name, "merge_seconds")}
        for name in runs
    }
    stream_requests = counted["requests"]["stream"]
    result = {
        "benchmark": "s3",
        "when": utc_stamp(),
        "machine": machine(),
        "command": f"python bench/s3_bench.py --objects {args.objects} --records {args.records} "
        f"--repeats {args.repeats}",
        "load_avg_1m": {"before": load_before, "after": load_avg_1m()},
        "spark_start_seconds": spark_seconds,
        "objects": args.objects,
        "records_per_object": args.records,
        "staging_bytes": sum(len(data) for data in objects.values()),
        "medians": summary,
        "ratios_s3_over_local": {
            "stream": round(stream_median("s3") / stream_median("local"), 2),
            "merge_spark_stage": round(
                summary["s3/spark"]["merge_seconds"] / summary["local/spark"]["merge_seconds"], 2
            ),
            "merge_in_process": round(
                summary["s3/in_process"]["merge_seconds"] / summary["local/in_process"]["merge_seconds"], 2
            ),
        },
        "requests": counted["requests"],
        "stream_requests_per_staging_object": round(stream_requests["total"] / args.objects, 2),
        "runs": runs,
    }
    save_json(args.out, result)
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "medians",
                    "ratios_s3_over_local",
                    "stream_requests_per_staging_object",
                    "requests",
                    "load_avg_1m",
                )
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""The benchmarks' generated inputs, made once and cached under a work directory with a manifest that
later runs with the same parameters reuse (delete the directory to regenerate).

  JSON lines   gzip JSON-lines staging objects of the demo table web.access (stream_bench.py): many of
               about one size, or one big object streamed to disk;
  log objects  small time-sorted zstd Parquet objects of a 6-column access-log table as the stream
               writes them (merge_bench.py), and their commit into a deployment as the stream commits.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from common import MB, cached_manifest, link_or_copy

from siltlake.demo.bench_inputs import write_big_object, write_jsonl_gz_objects
from siltlake.tabledef import TableDef

JSONL_GENERATOR_VERSION = 1  # bump when the generated data changes, to invalidate cached inputs
LOG_GENERATOR_VERSION = 1  # the same for the log objects
CODEC = "zstd"  # every merge peer writes zstd at its library's default level (Spark pinned to 1: merge_bench)
PARTITION_DATE = dt.date(2026, 11, 20)  # a Tokyo day: 2026-11-19 15:00 UTC to 2026-11-20 15:00 UTC
DAY_START_US = int(datetime(2026, 11, 19, 15, tzinfo=UTC).timestamp()) * 1_000_000
DAY_US = 86_400 * 1_000_000
LOG_TABLE = TableDef.from_mapping(
    {
        "schema": "bench",
        "name": "http_log",
        "time_column": "time",
        "timezone": "Asia/Tokyo",
        "merge_interval": "12h",
        "codec": CODEC,
        "columns": [
            {"name": "time", "type": "timestamp", "nullable": False},
            {"name": "host", "type": "string"},
            {"name": "status", "type": "int"},
            {"name": "path", "type": "string"},
            {"name": "user_id", "type": "bigint"},
            {"name": "latency_ms", "type": "double"},
        ],
    }
)
LOG_SCHEMA = LOG_TABLE.arrow_schema()


# --------------------------------------------------------------------------------------------------
# JSON lines: staging objects of the demo table


def prepare_jsonl_objects(workdir: Path, objects: int, object_bytes: int, seed: int, level: int) -> dict:
    """Generate the input objects once; later runs with the same parameters reuse them."""
    directory = workdir / "input" / f"objects-{objects}x{object_bytes}-seed{seed}-level{level}"
    expected = {
        "version": JSONL_GENERATOR_VERSION,
        "objects": objects,
        "object_bytes": object_bytes,
        "seed": seed,
        "compresslevel": level,
    }
    cached = cached_manifest(directory / "manifest.json", expected)
    if cached:
        print(f"input: reusing {cached['objects']} objects in {directory}", flush=True)
        return {**cached, "generated_now": False}
    shutil.rmtree(directory, ignore_errors=True)
    print(f"input: generating {objects} objects of ~{object_bytes / MB:g} MB in {directory} ...", flush=True)
    started = time.perf_counter()
    records, size = write_jsonl_gz_objects(directory / "staging", objects, object_bytes, seed, compresslevel=level)
    manifest = {
        **expected,
        "records": records,
        "bytes": size,
        "staging_root": str(directory / "staging"),
        "generate_seconds": round(time.perf_counter() - started, 2),
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(f"input: {records:,} records, {size / MB:,.1f} MB in {manifest['generate_seconds']} s", flush=True)
    return {**manifest, "generated_now": True}


def prepare_big_object(workdir: Path, megabytes: int, seed: int, level: int) -> dict:
    """One object of about `megabytes` MB compressed, streamed to disk once."""
    directory = workdir / "input" / f"big-{megabytes}mb-seed{seed}-level{level}"
    expected = {"version": JSONL_GENERATOR_VERSION, "megabytes": megabytes, "seed": seed, "compresslevel": level}
    cached = cached_manifest(directory / "manifest.json", expected)
    if cached:
        print(f"input: reusing {cached['path']}", flush=True)
        return {**cached, "generated_now": False}
    shutil.rmtree(directory, ignore_errors=True)
    path = directory / "staging" / "fluentd01.web.access" / "2026" / "11" / "20" / "web01-000001.jsonl.gz"
    print(f"input: streaming one ~{megabytes} MB object to {path} ...", flush=True)
    started = time.perf_counter()
    records, size = write_big_object(path, megabytes * MB, seed, compresslevel=level)
    manifest = {
        **expected,
        "records": records,
        "bytes": size,
        "path": str(path),
        "staging_root": str(directory / "staging"),
        "generate_seconds": round(time.perf_counter() - started, 2),
    }
    (directory / "manifest.json").write_text(json.dumps(manifest, indent=2))
    print(f"input: {records:,} records, {size / MB:,.1f} MB in {manifest['generate_seconds']} s", flush=True)
    return {**manifest, "generated_now": True}


def input_files(staging_root: str | Path) -> list[Path]:
    return sorted(Path(staging_root).rglob("*.jsonl.gz"))


# --------------------------------------------------------------------------------------------------
# log objects: small objects as the stream writes them (one time-sorted zstd Parquet file each)

_HOSTS = np.array([f"web{i:02d}.tokyo.example.net" for i in range(64)])
_PATHS = np.array(
    [f"/api/v2/{area}/{i}" for area in ("items", "users", "orders", "search", "cart") for i in range(400)]
)
_STATUSES = np.array([200] * 90 + [301, 302, 304, 400, 401, 403, 404, 404, 500, 503], dtype=np.int32)


def log_rows(rng: np.random.Generator, rows: int, start_us: int, span_us: int) -> pa.Table:
    """`rows` access-log rows with times in [start_us, start_us + span_us), sorted by time.

    A session id in the path and full-precision latencies keep the rows from compressing better than
    real logs: about 37 bytes a row in 500-row zstd objects, 30 once merged, 96 in Arrow memory.
    """
    times = np.sort(start_us + rng.integers(0, span_us, rows))
    paths = pc.binary_join_element_wise(
        pa.array(_PATHS[rng.zipf(1.3, rows) % len(_PATHS)]),
        pa.array(np.char.mod("%x", rng.integers(0, 2**63, rows))),
        "?sid=",
    )
    return pa.table(
        {
            "time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "host": _HOSTS[rng.integers(0, len(_HOSTS), rows)],
            "status": _STATUSES[rng.integers(0, len(_STATUSES), rows)],
            "path": paths,
            "user_id": rng.integers(1, 2_000_000_000, rows),
            "latency_ms": rng.lognormal(3.0, 1.0, rows),
        },
        schema=LOG_SCHEMA,
    )


def prepare_log_objects(workdir: Path, name: str, count: int, rows: int, seed: int, chronological: bool) -> dict:
    """`count` small objects of `rows` rows, generated once. Each covers 30 minutes of the Tokyo day:
    at random places (compact, memory) or in arrival order through the day (extend)."""
    directory = workdir / "input" / f"{name}-{count}x{rows}-seed{seed}"
    expected = {
        "version": LOG_GENERATOR_VERSION,
        "count": count,
        "rows": rows,
        "seed": seed,
        "chronological": chronological,
    }
    manifest_path = directory / "_manifest.json"  # Spark and Delta skip names starting with _
    cached = cached_manifest(manifest_path, expected)
    if cached:
        print(f"input: reusing {count} objects in {directory}", flush=True)
        return cached
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    print(f"input: generating {count} objects of {rows} rows in {directory} ...", flush=True)
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    window = 1800 * 1_000_000
    objects = []
    for i in range(count):
        if chronological:
            start = DAY_START_US + int((DAY_US - window) * i / max(1, count - 1))
        else:
            start = DAY_START_US + int(rng.integers(0, DAY_US - window))
        table = log_rows(rng, rows, start, window)
        path = directory / f"obj-{i + 1:05d}.parquet"
        pq.write_table(table, path, compression=CODEC)
        times = table.column("time")
        objects.append(
            {
                "file": path.name,
                "bytes": path.stat().st_size,
                "rows": rows,
                "min_us": pc.min(times).cast(pa.int64()).as_py(),
                "max_us": pc.max(times).cast(pa.int64()).as_py(),
            }
        )
    manifest = {
        **expected,
        "generated_at": datetime.now(UTC).isoformat(),
        "directory": str(directory),
        "objects": objects,
        "total_rows": count * rows,
        "total_bytes": sum(o["bytes"] for o in objects),
        "generate_seconds": round(time.perf_counter() - started, 2),
    }
    manifest_path.write_text(json.dumps(manifest))
    print(
        f"input: {manifest['total_rows']:,} rows, {manifest['total_bytes'] / MB:.1f} MB "
        f"in {manifest['generate_seconds']} s",
        flush=True,
    )
    return manifest


def object_paths(data: dict) -> list[Path]:
    return [Path(data["directory"]) / o["file"] for o in data["objects"]]


def input_summary(data: dict) -> dict:
    """The manifest without its list of objects, for a report."""
    return {k: v for k, v in data.items() if k != "objects"}


def commit_log_objects(deployment, table, date: dt.date, data: dict, objects: list[dict]) -> None:
    """Put ready-made small objects into the lake under their id-derived keys and commit them the way
    the stream does (staging rows, small-object rows, the partition's waiting merge job)."""
    from siltlake.clock import utcnow

    catalog = deployment.catalog
    lake = deployment.lake
    layout = table.layout(deployment.instance_key)
    now = utcnow()
    tag = f"{date.isoformat()}-{objects[0]['file']}"
    uris = [f"file:///bench-staging/{table.physical_table_name}/{tag}/{o['file']}.jsonl.gz" for o in objects]
    catalog.staging.register([(uri, table.id, o["bytes"], None) for uri, o in zip(uris, objects, strict=True)])
    pending = {p.uri: p.id for p in catalog.staging.pending(len(uris) + 1000)}
    with catalog.partitions.stream_commit() as tx:
        for uri, item, object_id in zip(uris, objects, tx.allocate_ids(len(objects)), strict=True):
            partition = tx.partition_for(table.id, date, table.definition.merge_interval, now)
            key = layout.small_object(date, object_id, partition.closed)
            link_or_copy(Path(data["directory"]) / item["file"], Path(lake.path(key)))
            tx.add_small_object(
                object_id=object_id,
                staging_object_id=pending[uri],
                partition_id=partition.id,
                delayed=partition.closed,
                content_length=item["bytes"],
                row_count=item["rows"],
                min_event_time=datetime.fromtimestamp(item["min_us"] / 1e6, UTC).replace(tzinfo=None),
                max_event_time=datetime.fromtimestamp(item["max_us"] / 1e6, UTC).replace(tzinfo=None),
                upload_start_time=now,
            )
            tx.mark_processed(pending[uri], records_in=item["rows"], bad_records=0, error_uri=None, now=now)

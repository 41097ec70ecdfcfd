#!/usr/bin/env python
"""Small-object stream benchmark: siltlake on shipper-sized objects against a pyarrow floor, naive Spark
and delta-rs, on the same files, in one run.

Log shippers (Fluentd, Vector) flush small gzip JSON-lines objects every few seconds; a stream that
pays a fixed cost per object falls behind them long before it runs out of bandwidth. For each case
the same generated objects (bench/inputs.py, cached under --workdir) go through

  floor     pyarrow read_json + one zstd Parquet file per partition date per object, 2 threads
            (stream_bench.run_floor);
  spark     naive Spark in the run's already-started session: read.json(files, schema) + dt +
            write.partitionBy("dt").parquet, after an untimed warm-up job (stream_bench.run_spark);
  delta     delta-rs: each object decoded with pyarrow (read_json + dt) and appended with
            write_deltalake(path, mode="append", partition_by=["dt"]) as it arrives, one commit each;
  siltlake  a deployment on the same session, warm: stream_once over a few warm-up objects first
            (untimed), then the measured objects are put into staging and stream_once alone is timed,
            with the driver's CPU time and the catalog statements it issued (a wave this small decodes
            on the host's worker processes: stream.in_driver_bytes);
  siltlake_spark  the same with stream.in_driver_bytes = 0: every wave a Spark stage (with --repeat).

Cases: small (400 x 30 KB), backlog (400 and 4,000 x 10 KB), big (40 x 1 MB).

Run from the repository root:  .venv/bin/python bench/small_objects_bench.py [--scale 0.1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import (
    RESULTS,
    ROOT,
    Measure,
    StatementCounter,
    args_record,
    catalog_url,
    link_or_copy,
    load_avg_1m,
    machine,
    new_deployment,
    start_spark,
    tree_cpu_seconds,
    utc_stamp,
    warm_page_cache,
    write_report,
)
from inputs import input_files, prepare_jsonl_objects
from stream_bench import (
    TABLE,
    figures,
    partition_dates,
    read_object,
    read_schema,
    run_floor,
    run_spark,
    spark_conf,
)

PEERS = ("floor", "spark", "delta", "siltlake", "siltlake_spark")
CATALOGS = {"sqlite": ("sqlite",), "pg": ("postgresql",), "both": ("sqlite", "postgresql")}
WARMUP_PREFIX = "warmup.web.access"  # another staging prefix that maps to the same table


@dataclass(frozen=True)
class Size:
    """One set of inputs of a case: `objects` objects of about `object_bytes` compressed each."""

    case: str
    objects: int
    object_bytes: int
    all_peers: bool  # False: floor and siltlake only, unless --all-peers

    @property
    def label(self) -> str:
        size = (
            f"{self.object_bytes // 1_000_000}MB"
            if self.object_bytes >= 1_000_000
            else f"{self.object_bytes // 1000}KB"
        )
        return f"{self.case} {self.objects}x{size}"


CASES = {
    "small": [(400, 30_000, True)],
    "backlog": [(400, 10_000, True), (4000, 10_000, False)],
    "big": [(40, 1_000_000, True)],
}


def sizes(cases: list[str], scale: float) -> list[Size]:
    return [
        Size(case, max(1, round(objects * scale)), object_bytes, all_peers)
        for case in cases
        for objects, object_bytes, all_peers in CASES[case]
    ]


def per_object(result: dict, objects: int) -> dict:
    """The figures a backlog is judged by: wall milliseconds per object."""
    if result.get("status") == "ok":
        if (result.get("cpu_seconds") or 0) < 0:  # an idle Spark Python worker exited and took its CPU time
            result["cpu_seconds"] = result["cpu_per_wall"] = None
        result["objects"] = objects
        result["ms_per_object"] = round(result["seconds"] * 1000 / objects, 3)
    return result


# --------------------------------------------------------------------------------------------------
# delta-rs: one append (one commit) per object as it arrives


def delta_appends(files: list[Path], out: Path) -> int:
    """What a delta-rs user writes to ingest objects one by one: decode, add dt, append."""
    from deltalake import WriterProperties, write_deltalake

    schema = read_schema()
    properties = WriterProperties(compression="ZSTD")  # the other peers write zstd too
    rows = 0
    for path in files:
        table = read_object(path, schema, use_threads=True)
        table = table.append_column("dt", partition_dates(table[TABLE.time_column]))
        write_deltalake(str(out), table, mode="append", partition_by=["dt"], writer_properties=properties)
        rows += table.num_rows
    return rows


def run_delta(files: list[Path], out: Path, input_bytes: int) -> dict:
    from deltalake import DeltaTable

    shutil.rmtree(out, ignore_errors=True)
    with Measure() as measured:
        rows = delta_appends(files, out)
    table = DeltaTable(str(out))
    written = table.get_add_actions(flatten=True)
    return figures(
        "delta-rs (write_deltalake per object)",
        measured,
        rows,
        input_bytes,
        version=table.version(),
        files_written=written.num_rows,
        rows_in_log=sum(written.column("num_records").to_pylist()),
    )


# --------------------------------------------------------------------------------------------------
# siltlake, warm: the session up, Python workers started, the catalog connected


def put_objects(files: list[Path], source_root: Path, staging: Path, prefix: str | None = None) -> None:
    """Link objects into a staging root under their keys; with prefix, under another first segment."""
    for path in files:
        key = path.relative_to(source_root).parts
        if prefix:
            key = (prefix, *key[1:])
        link_or_copy(path, staging.joinpath(*key))


def stream_checked(deployment):
    from siltlake.stream import stream_once

    report = stream_once(deployment)
    if report.failed or report.unknown:
        raise RuntimeError(f"siltlake failed on {report.failed or report.unknown}")
    return report


def timed_stream(deployment, counter: StatementCounter, objects: int) -> dict:
    """stream_once alone: wall and report seconds, the driver process's CPU (time.process_time, no
    sampling thread running), the process tree's CPU, catalog statements and transactions."""
    load_before = load_avg_1m()
    statements, transactions = counter.mark()
    tree_before = tree_cpu_seconds()
    driver_before = time.process_time()
    started = time.perf_counter()
    report = stream_checked(deployment)
    seconds = time.perf_counter() - started
    driver_cpu = time.process_time() - driver_before
    tree_cpu = tree_cpu_seconds() - tree_before
    statements, transactions = counter.statements - statements, counter.transactions - transactions
    return {
        "seconds": round(seconds, 3),
        "report_seconds": round(report.seconds, 3),
        "processed": report.processed,
        "records": report.records_loaded,
        "live_objects": report.live_objects,
        "delayed_objects": report.delayed_objects,
        "bytes_written": report.bytes_written,
        "local_waves": report.local_waves,
        "driver_cpu_seconds": round(driver_cpu, 3),
        "driver_cpu_ms_per_object": round(driver_cpu * 1000 / objects, 3),
        "cpu_seconds": round(tree_cpu, 2) if tree_cpu >= 0 else None,  # a worker exited: its CPU is lost
        "statements": statements,
        "statements_per_object": round(statements / objects, 2),
        "transactions": transactions,
        "transactions_per_object": round(transactions / objects, 3),
        "load_avg_1m_before": load_before,
        "load_avg_1m_after": load_avg_1m(),
    }


def run_siltlake(
    spark,
    kind: str,
    root: Path,
    files: list[Path],
    source_root: Path,
    warmup: dict,
    input_bytes: int,
    stream: dict | None = None,
) -> dict:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    staging = root / "staging"
    staging.mkdir()
    name = f"siltlake ({kind}, warm{', every wave on Spark' if stream else ''})"
    try:
        with catalog_url(kind, root) as url:
            deployment = new_deployment("bench0001", root, catalog_url=url, staging_root=staging, stream=stream)
            try:
                deployment.use_spark(spark)
                deployment.catalog.tables.create(TABLE)
                counter = StatementCounter(deployment.catalog.engine)
                warmup_root = Path(warmup["staging_root"])
                put_objects(input_files(warmup_root), warmup_root, staging, WARMUP_PREFIX)
                warm = stream_checked(deployment)
                put_objects(files, source_root, staging)
                details = timed_stream(deployment, counter, len(files))
            finally:
                deployment.close()
    except Exception as exc:  # report and keep the peers' figures
        return {"peer": name, "status": "failed", "message": f"{type(exc).__name__}: {exc}"}
    seconds = details["seconds"]
    return {
        "peer": name,
        "status": "ok",
        **details,
        "records_per_s": round(details["records"] / seconds) if seconds else None,
        "mb_per_s": round(input_bytes / 1e6 / seconds, 2) if seconds else None,
        "warmup": {"objects": warm.processed, "seconds": round(warm.seconds, 2)},
    }


# --------------------------------------------------------------------------------------------------
# a size: every peer over the same objects


def interleaved(
    args,
    peers: set[str],
    files: list[Path],
    out: Path,
    data: dict,
    source_root: Path,
    warmup: dict,
    catalogs: tuple[str, ...],
) -> dict:
    """The floor and siltlake --repeat times each, alternating which goes first; each peer's median run, with every
    run's seconds and load beside it."""
    runs: dict[str, list[dict]] = {}
    names = [name for name in ("floor", "siltlake", "siltlake_spark") if name in peers]
    for rep in range(args.repeat):
        for name in names if rep % 2 == 0 else names[::-1]:
            print(f"running {name} ({rep + 1}/{args.repeat}) ...", flush=True)
            warm_page_cache(files)  # the kernel may have paged them out since the last run
            if name == "floor":
                runs.setdefault("floor", []).append(run_floor(files, out / "floor", data["bytes"]))
                continue
            spark_only = {"in_driver_bytes": 0, "wave_engine": "spark"} if name == "siltlake_spark" else None
            for kind in catalogs:
                key = name if kind == "sqlite" else f"{name}_pg"
                runs.setdefault(key, []).append(
                    run_siltlake(
                        args.spark,
                        kind,
                        out / f"siltlake-{kind}",
                        files,
                        source_root,
                        warmup,
                        data["bytes"],
                        spark_only,
                    )
                )
    medians = {}
    for key, found in runs.items():
        ok = sorted((run for run in found if run.get("status") == "ok"), key=lambda run: run["seconds"])
        if not ok:
            medians[key] = found[-1]
            continue
        medians[key] = {
            **ok[(len(ok) - 1) // 2],
            "seconds": statistics.median(run["seconds"] for run in ok),
            "all_seconds": [run["seconds"] for run in found if run.get("status") == "ok"],
            "all_loads": [run.get("load_avg_1m_before") for run in found if run.get("status") == "ok"],
        }
    return medians


def run_size(args, size: Size, spark, catalogs: tuple[str, ...], workdir: Path) -> dict:
    print(f"\n== {size.label}", flush=True)
    data = prepare_jsonl_objects(workdir, size.objects, size.object_bytes, args.seed, args.compresslevel)
    warmup = prepare_jsonl_objects(workdir, args.warmup_objects, size.object_bytes, args.seed + 1, args.compresslevel)
    source_root = Path(data["staging_root"])
    files = input_files(source_root)
    if len(files) != size.objects:
        raise SystemExit(f"expected {size.objects} input objects, found {len(files)}: delete {source_root.parent}")
    os.sync()  # inputs written just now must not be flushed to disk while a peer is timed
    warm_page_cache(files)
    out = workdir / "out" / size.label.replace(" ", "-")
    peers = (
        set(args.peers)
        if size.all_peers or args.all_peers
        else set(args.peers) & {"floor", "siltlake", "siltlake_spark"}
    )
    results: dict = {}
    if args.repeat > 1:
        results.update(interleaved(args, peers, files, out, data, source_root, warmup, catalogs))
        peers -= {"floor", "siltlake", "siltlake_spark"}
    if "floor" in peers:
        print("running floor ...", flush=True)
        results["floor"] = run_floor(files, out / "floor", data["bytes"])
    if "spark" in peers:
        print("running naive spark ...", flush=True)
        results["spark"] = run_spark(spark, files, out / "spark", data["bytes"], False, True)
    if "delta" in peers:
        print("running delta-rs ...", flush=True)
        results["delta"] = run_delta(files, out / "delta", data["bytes"])
    for name in ("siltlake", "siltlake_spark"):
        if name not in peers:
            continue
        for kind in catalogs:
            key = name if kind == "sqlite" else f"{name}_pg"
            print(f"running {name} ({kind}) ...", flush=True)
            results[key] = run_siltlake(
                spark,
                kind,
                out / f"siltlake-{kind}",
                files,
                source_root,
                warmup,
                data["bytes"],
                {"in_driver_bytes": 0, "wave_engine": "spark"} if name == "siltlake_spark" else None,
            )
    shutil.rmtree(out, ignore_errors=True)  # the outputs were counted; 4,000-object trees add up
    for name, result in results.items():
        per_object(result, size.objects)
        if result.get("status") == "ok" and result["records"] != data["records"]:
            result["warning"] = f"{name} wrote {result['records']:,} rows, input has {data['records']:,}"
            print(f"WARNING: {result['warning']}")
    return {
        "case": size.case,
        "label": size.label,
        "objects": size.objects,
        "object_bytes": size.object_bytes,
        "input": {k: v for k, v in data.items() if k != "generated_now"},
        "results": results,
        "ratios": ratios(results),
    }


def ratios(results: dict) -> dict:
    """Wall time of each peer over the floor's, and siltlake's over delta-rs's."""
    ok = {name: r["seconds"] for name, r in results.items() if r.get("status") == "ok"}
    found = {}
    if "floor" in ok:
        for name in ok:
            if name != "floor":
                found[f"{name}_over_floor"] = round(ok[name] / ok["floor"], 2)
    if "delta" in ok:
        for name in ok:
            if name.startswith("siltlake"):
                found[f"{name}_over_delta"] = round(ok[name] / ok["delta"], 2)
    return found


# --------------------------------------------------------------------------------------------------
# reporting


def print_table(sizes_run: list[dict]) -> None:
    header = (
        f"{'case':20} {'peer':12} {'seconds':>8} {'ms/obj':>8} {'records/s':>10} {'x floor':>8} "
        f"{'tree cpu s':>10} {'drv cpu ms/obj':>14} {'stmts/obj':>9}"
    )
    print()
    print(header)
    print("-" * len(header))
    for size in sizes_run:
        for name, result in size["results"].items():
            if result.get("status") != "ok":
                print(f"{size['label']:20} {name:12} {result['status']}: {result.get('message', '')}")
                continue
            over = size["ratios"].get(f"{name}_over_floor")
            cpu = result.get("cpu_seconds")
            print(
                f"{size['label']:20} {name:12} {result['seconds']:>8.2f} {result['ms_per_object']:>8.2f} "
                f"{result['records_per_s']:>10,} {over if over is not None else '':>8} "
                f"{cpu if cpu is not None else '?':>10} "
                f"{result.get('driver_cpu_ms_per_object', ''):>14} {result.get('statements_per_object', ''):>9}"
            )
        versus = {k: v for k, v in size["ratios"].items() if k.endswith("_over_delta")}
        if versus:
            print(f"{'':20} {versus}")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cases", default="small,backlog,big", help="comma-separated subset of small,backlog,big (default all)"
    )
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)}")
    parser.add_argument(
        "--all-peers",
        action="store_true",
        help="spark and delta-rs on the 4,000-object backlog too (default: floor and siltlake only)",
    )
    parser.add_argument(
        "--catalog",
        choices=sorted(CATALOGS),
        default="sqlite",
        help="siltlake's catalog: sqlite, pg (a fresh PostgreSQL database; SILTLAKE_BENCH_PG) or both",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every object count by this (0.1: a quick check), at least 1 object",
    )
    parser.add_argument(
        "--warmup-objects",
        type=int,
        default=8,
        help="objects siltlake streams, untimed, before the measured run (default 8)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=ROOT / "bench" / "data", help="cached inputs and outputs (default bench/data)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "small_objects.json")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of the floor and siltlake per case, interleaved; the report gives medians",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--compresslevel", type=int, default=6, help="gzip level of the inputs (6, as shippers)")
    parser.add_argument("--spark-driver-memory", default="2g")
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    args.peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = (set(cases) - set(CASES)) | (set(args.peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown cases or peers: {', '.join(sorted(unknown))}")
    if args.scale <= 0 or args.warmup_objects < 1:
        parser.error("--scale must be positive and --warmup-objects at least 1")
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "started_at": utc_stamp(),
        "machine": machine(),
        "load_avg_1m_start": load_avg_1m(),
        "args": args_record(args),
    }
    spark = None
    if {"spark", "siltlake"} & set(args.peers):
        # one session for the whole run: the naive job uses it, and every siltlake deployment runs on it
        print("starting spark ...", flush=True)
        spark, report["spark_session_start_seconds"] = start_spark(
            "siltlake-small-objects-bench", spark_conf(workdir, args.spark_driver_memory)
        )
    args.spark = spark
    try:
        report["sizes"] = [
            run_size(args, size, spark, CATALOGS[args.catalog], workdir) for size in sizes(cases, args.scale)
        ]
    finally:
        if spark is not None:
            spark.stop()
    report["load_avg_1m_end"] = load_avg_1m()
    report["finished_at"] = utc_stamp()
    print_table(report["sizes"])
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

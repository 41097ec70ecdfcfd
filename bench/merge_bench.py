#!/usr/bin/env python
"""Merge benchmark: siltlake's merge task against delta-rs, naive Spark and a pyarrow floor, in one run.

Subcommands (each writes bench/results/merge_<name>.json; ``all`` runs the four on one SparkSession):

  compact  2,000 small Parquet objects (1 M rows of a 6-column log table, zstd) into one object:
           siltlake deep and auto as the bare task (run_merge_task in this process) and through the
           full path (merge_once, SQLite catalog; in-process under merge.in_driver_bytes, else one Spark
           task); delta-rs optimize.compact() on a Delta table holding the same 2,000 files; naive Spark
           read.parquet(files).sort(time).coalesce(1).write; a pyarrow floor (read all, sort, write).
  extend   a day of extensions: ROUNDS merge rounds, each adding PER_ROUND small objects to the open
           range's object, auto against deep: bytes decoded and wall time.
  query    a Spark aggregate over one partition as 2,000 small objects, then over its merged object.
  memory   peak RSS of one deep merge task in a fresh process, against the merged rows' Arrow size.

Inputs are generated once and cached under --workdir (default bench/data/merge).
Run from the repository root:  .venv/bin/python bench/merge_bench.py all
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
from common import (
    MIB,
    RESULTS,
    ROOT,
    Measure,
    args_record,
    interleaved_runs,
    link_or_copy,
    machine,
    new_deployment,
    start_spark,
    timed_runs,
    utc_stamp,
    warm_page_cache,
    write_report,
)
from inputs import (
    CODEC,
    LOG_SCHEMA,
    LOG_TABLE,
    PARTITION_DATE,
    commit_log_objects,
    input_summary,
    object_paths,
    prepare_log_objects,
)
from merge_memory import memory_child, run_memory
from merge_tasks import bare_task, parquet_stats, run_bare, table_def

from siltlake.storage.filesystem import Storage

# --------------------------------------------------------------------------------------------------
# Spark


def spark_conf(workdir: Path, driver_memory: str) -> dict[str, str]:
    """The run's one session (local[2]): the peers' codec at their level, temporary files in workdir."""
    return {
        "spark.driver.memory": driver_memory,
        "spark.sql.parquet.compression.codec": CODEC,
        # parquet-java writes zstd at level 3 by default; pyarrow and delta-rs write level 1
        "spark.hadoop.parquet.compression.codec.zstd.level": "1",
        "spark.local.dir": str(workdir / "spark-tmp"),
    }


def naive_spark_job(spark, files: list[Path], out: Path) -> None:
    frame = spark.read.parquet(*[str(f) for f in files])
    frame.sort(LOG_TABLE.time_column).coalesce(1).write.mode("overwrite").parquet(str(out))


def full_deployment(root: Path, spark, mode: str):
    """A fresh deployment (SQLite catalog, local lake) on the bench's SparkSession, with the table."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    deployment = new_deployment("mbench01", root)
    deployment.use_spark(spark)
    table = deployment.catalog.tables.create(table_def(mode))
    return deployment, table


def merge_all_due(deployment) -> dict:
    """merge_once with a clock a day ahead, so the jobs scheduled merge_interval out are due now."""
    from siltlake.clock import utcnow
    from siltlake.merge.runner import merge_once

    report = merge_once(deployment, clock=lambda: utcnow() + dt.timedelta(days=1))
    if report.failed or report.errors:
        raise RuntimeError(f"merge_once failed: {report.errors}")
    return {
        "jobs": report.finished,
        "stages": report.stages,
        "rows_out": report.rows_out,
        "bytes_out": report.bytes_out,
        "bytes_decoded": report.bytes_decoded,
        "modes": report.modes,
        "merge_seconds": round(report.seconds, 3),
    }


# --------------------------------------------------------------------------------------------------
# 1. compact


def run_compact(args, workdir: Path, spark) -> dict:
    data = prepare_log_objects(workdir, "compact", args.objects, args.rows_per_object, args.seed, chronological=False)
    files = object_paths(data)
    warm_page_cache(files)
    rows, small_bytes = data["total_rows"], data["total_bytes"]
    out = workdir / "out" / "compact"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    lake = Storage(str(workdir))
    keys = [str(p.relative_to(workdir)) for p in files]
    peers = {p.strip() for p in args.peers.split(",") if p.strip()}
    results: dict = {}

    fast: dict = {}  # the in-process peers, run in interleaved rounds
    outputs: dict = {}
    for mode in ("deep", "auto"):
        name = f"siltlake_{mode}_task"
        if name in peers:
            key = f"out/compact/{mode}-task/merged.parquet"
            task = bare_task(lake, keys, small_bytes, key, mode)

            def bare(_state, task=task) -> dict:
                outcome = run_bare(task)["ranges"][0]
                return {"mode": outcome["mode"], "bytes_decoded": outcome["bytes_decoded"]}

            fast[name] = (None, bare)
            outputs[name] = [workdir / key]
    if "delta" in peers:
        fast["delta"] = delta_peer(data, workdir)
    if "floor" in peers:
        target = out / "floor.parquet"

        def floor(_state, target=target) -> None:
            table = pq.read_table([str(f) for f in files]).sort_by(LOG_TABLE.time_column)
            pq.write_table(table, target, compression=CODEC)

        fast["floor"] = (None, floor)
        outputs["floor"] = [target]
    if fast:
        print(f"running {', '.join(fast)} in {args.repeats} interleaved rounds ...", flush=True)
        for name, timing in interleaved_runs(fast, args.repeats).items():
            if name == "delta":
                import deltalake
                from deltalake import DeltaTable

                live = DeltaTable(str(workdir / "out" / "compact" / "delta")).file_uris()
                outputs[name] = [Path(uri.removeprefix("file://")) for uri in live]
                timing["deltalake"] = deltalake.__version__
            results[name] = {**timing, **parquet_stats(outputs[name])}

    full: dict = {}  # the catalog-driven path, deep and auto in interleaved rounds
    warmup = prepare_log_objects(workdir, "warmup", 20, 500, args.seed + 1, chronological=False)
    for mode in ("deep", "auto"):
        name = f"siltlake_{mode}_full"
        if name not in peers:
            continue
        root = workdir / "out" / "compact" / f"{mode}-full"

        def prepare(_attempt, root=root, mode=mode):
            deployment, table = full_deployment(root, spark, mode)
            # untimed first: a stage merging two small partitions, so both Spark Python workers (local[2])
            # have imported pyarrow and siltlake before the timed stage, whichever worker gets its task
            for days in (1, 2):
                commit_log_objects(
                    deployment, table, PARTITION_DATE - dt.timedelta(days=days), warmup, warmup["objects"]
                )
            merge_all_due(deployment)
            commit_log_objects(deployment, table, PARTITION_DATE, data, data["objects"])
            return deployment

        def run_full(deployment) -> dict:
            try:
                return merge_all_due(deployment)
            finally:
                deployment.close()

        full[name] = (prepare, run_full)
        outputs[name] = root
    if full:
        print(
            f"running {', '.join(full)} (merge_once, SQLite catalog) in {args.full_repeats} interleaved rounds ...",
            flush=True,
        )
        for name, timing in interleaved_runs(full, args.full_repeats).items():
            merged = sorted(outputs[name].rglob(f"merged/dt={PARTITION_DATE.isoformat()}/*.parquet"))
            results[name] = {**timing, **parquet_stats(merged)}

    if "spark" in peers:
        print("running naive spark ...", flush=True)
        target = out / "spark"
        naive_spark_job(spark, files[:20], out / "spark-warmup")  # untimed: JVM class loading and JIT
        shutil.rmtree(out / "spark-warmup", ignore_errors=True)

        def prepare_spark(_attempt) -> None:
            shutil.rmtree(target, ignore_errors=True)

        timing = timed_runs(
            "spark", args.spark_repeats, prepare_spark, lambda _s: naive_spark_job(spark, files, target)
        )
        results["spark"] = {**timing, **parquet_stats(sorted(target.glob("*.parquet")))}

    for name, result in results.items():
        if result["rows_written"] != rows:
            result["warning"] = f"{name} wrote {result['rows_written']:,} rows, the input has {rows:,}"
            print(f"WARNING: {result['warning']}")
    return {"input": input_summary(data), "codec": CODEC, "results": results, "ratios": compact_ratios(results)}


def delta_peer(data: dict, workdir: Path) -> tuple[Callable[[int], object], Callable[[object], dict]]:
    """delta-rs compaction of a Delta table whose files are the same small objects: (prepare, run)."""
    from deltalake import DeltaTable, WriterProperties, convert_to_deltalake

    source = workdir / "input" / f"delta-{Path(data['directory']).name}"
    marker = source.with_suffix(".json")  # which generation of the input the Delta table was made from
    if not (source / "_delta_log").exists() or not marker.exists() or marker.read_text() != data["generated_at"]:
        # one commit adding all the files (2,000 write_deltalake appends take about 6 minutes here)
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir(parents=True)
        for path in object_paths(data):
            link_or_copy(path, source / path.name)
        convert_to_deltalake(str(source))
        marker.write_text(data["generated_at"])
    table_dir = workdir / "out" / "compact" / "delta"
    properties = WriterProperties(compression=CODEC.upper())

    def prepare(_attempt) -> None:
        shutil.rmtree(table_dir, ignore_errors=True)
        table_dir.mkdir(parents=True)
        for path in source.iterdir():
            if path.is_file():
                link_or_copy(path, table_dir / path.name)  # compaction only adds files: the originals are safe
        shutil.copytree(source / "_delta_log", table_dir / "_delta_log")

    def compact(_state) -> dict:
        metrics = DeltaTable(str(table_dir)).optimize.compact(writer_properties=properties)
        return {"files_added": metrics["numFilesAdded"], "files_removed": metrics["numFilesRemoved"]}

    return prepare, compact


def compact_ratios(results: dict) -> dict:
    found: dict = {}
    for silt in ("siltlake_deep_task", "siltlake_deep_full", "siltlake_auto_task", "siltlake_auto_full"):
        if silt not in results:
            continue
        for stat in ("best_seconds", "median_seconds", "median_cpu_seconds"):
            mine = results[silt][stat]
            for peer in ("spark", "delta", "floor"):
                theirs = results.get(peer, {}).get(stat)
                if not mine or not theirs:
                    continue
                if peer == "spark":
                    found.setdefault(f"spark_over_{silt}", {})[stat] = round(theirs / mine, 2)
                else:
                    found.setdefault(f"{silt}_over_{peer}", {})[stat] = round(mine / theirs, 2)
    targets = {}
    for silt in ("siltlake_deep_task", "siltlake_deep_full"):
        if f"spark_over_{silt}" in found:
            targets[f"{silt}: at least 10x faster than naive Spark"] = found[f"spark_over_{silt}"]["best_seconds"] >= 10
        if f"{silt}_over_delta" in found:
            targets[f"{silt}: within 1.5x of delta-rs"] = found[f"{silt}_over_delta"]["best_seconds"] <= 1.5
    for silt in [s for s in ("siltlake_deep_full", "siltlake_auto_full") if f"{s}_over_delta" in found]:
        targets[f"{silt}: within 2x of delta-rs"] = found[f"{silt}_over_delta"]["best_seconds"] <= 2  # the target
    found["targets_met_best_of_runs"] = targets
    return found


# --------------------------------------------------------------------------------------------------
# 2. extend


def run_extend(args, workdir: Path) -> dict:
    count = args.rounds * args.per_round
    data = prepare_log_objects(workdir, "extend", count, args.extend_rows_per_object, args.seed + 2, chronological=True)
    files = object_paths(data)
    warm_page_cache(files)
    lake = Storage(str(workdir))
    keys = [str(p.relative_to(workdir)) for p in files]
    sizes = [o["bytes"] for o in data["objects"]]
    row_group_bytes = args.extend_row_group_mib * MIB
    results = {}
    for mode in ("auto", "deep"):
        out = workdir / "out" / "extend" / mode
        shutil.rmtree(out, ignore_errors=True)
        print(f"running {args.rounds} rounds of {mode} ...", flush=True)
        existing: str | None = None
        rounds = []
        with Measure() as measured:
            for number in range(args.rounds):
                chosen = slice(number * args.per_round, (number + 1) * args.per_round)
                upper = (number + 1) * args.per_round
                output = f"out/extend/{mode}/part-{0:06d}-{upper:06d}.parquet"
                started = time.perf_counter()
                outcome = run_bare(
                    bare_task(
                        lake,
                        keys[chosen],
                        sum(sizes[chosen]),
                        output,
                        mode,
                        existing_key=existing,
                        row_group_bytes=row_group_bytes,
                        upper=upper,
                    )
                )["ranges"][0]
                seconds = time.perf_counter() - started
                if existing is not None:
                    lake.delete(existing)  # the committed range's old object goes once the new one is in
                existing = output
                rounds.append(
                    {
                        "round": number + 1,
                        "mode": outcome["mode"],
                        "seconds": round(seconds, 4),
                        "bytes_decoded": outcome["bytes_decoded"],
                        "bytes_out": outcome["bytes_out"],
                        "rows": outcome["rows"],
                        "notes": outcome["notes"],
                    }
                )
                if (number + 1) % 50 == 0:
                    print(
                        f"  {mode}: round {number + 1}: object {outcome['bytes_out'] / MIB:.1f} MiB, "
                        f"{time.perf_counter() - measured.started:.1f} s so far",
                        flush=True,
                    )
        final = workdir / existing
        metadata = pq.ParquetFile(final).metadata
        modes: dict[str, int] = {}
        for item in rounds:
            modes[item["mode"]] = modes.get(item["mode"], 0) + 1
        results[mode] = {
            "seconds": round(measured.seconds, 3),
            **measured.extra(),
            "task_seconds": round(sum(r["seconds"] for r in rounds), 3),
            "bytes_decoded": sum(r["bytes_decoded"] for r in rounds),
            "bytes_written": sum(r["bytes_out"] for r in rounds),
            "round_modes": modes,
            "fallback_notes": sorted({n for r in rounds for n in r["notes"]})[:5],
            "final_object_bytes": final.stat().st_size,
            "final_rows": metadata.num_rows,
            "final_row_groups": metadata.num_row_groups,
            "final_row_group_rows": [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)],
            "last_round_seconds": rounds[-1]["seconds"],
            "rounds": rounds,
            **{k: v for k, v in parquet_stats([final]).items() if k == "time_sorted_row_groups"},
        }
        results[mode]["final_path"] = str(final)
    same = same_rows(Path(results["auto"].pop("final_path")), Path(results["deep"].pop("final_path")))
    auto, deep = results["auto"], results["deep"]
    ratios = {
        "auto_bytes_decoded_over_deep": round(auto["bytes_decoded"] / deep["bytes_decoded"], 4),
        "deep_seconds_over_auto": round(deep["seconds"] / auto["seconds"], 2),
        "deep_cpu_over_auto": round(deep["cpu_seconds"] / auto["cpu_seconds"], 2),
    }
    ratios["targets_met"] = {
        "auto decodes at most 10% of the bytes deep decodes": ratios["auto_bytes_decoded_over_deep"] <= 0.10,
        "auto at least 3x faster overall": ratios["deep_seconds_over_auto"] >= 3,
    }
    return {
        "input": input_summary(data),
        "codec": CODEC,
        "rounds": args.rounds,
        "objects_per_round": args.per_round,
        "row_group_bytes": row_group_bytes,
        "final_objects_hold_the_same_rows": same,
        "results": results,
        "ratios": ratios,
    }


def same_rows(left: Path, right: Path) -> bool:
    keys = [(name, "ascending") for name in LOG_SCHEMA.names]
    return pq.read_table(left).sort_by(keys).equals(pq.read_table(right).sort_by(keys))


# --------------------------------------------------------------------------------------------------
# 3. query


def run_query(args, workdir: Path, spark) -> dict:
    from pyspark.sql import functions as F

    data = prepare_log_objects(workdir, "compact", args.objects, args.rows_per_object, args.seed, chronological=False)
    files = object_paths(data)
    warm_page_cache(files)
    merged = workdir / "out" / "query" / "merged.parquet"
    keys = [str(p.relative_to(workdir)) for p in files]
    run_bare(bare_task(Storage(str(workdir)), keys, data["total_bytes"], str(merged.relative_to(workdir)), "deep"))
    warm_page_cache([merged])
    results = {}
    for label, location in (("small_objects", Path(data["directory"])), ("merged_object", merged)):

        def aggregate(_state, location=location) -> dict:
            frame = spark.read.parquet(str(location))
            found = (
                frame.groupBy("status")
                .agg(F.count(F.lit(1)).alias("requests"), F.sum("latency_ms").alias("latency"))
                .collect()
            )
            return {"rows_counted": sum(r["requests"] for r in found), "groups": len(found)}

        print(f"running the aggregate over {label} ...", flush=True)
        aggregate(None)  # untimed warm-up
        results[label] = {
            **timed_runs(label, args.query_repeats, None, aggregate),
            "files": len(files) if label == "small_objects" else 1,
        }
    query = "spark.read.parquet(dir).groupBy('status').agg(count(1), sum('latency_ms')).collect()"
    ratios = {
        stat: round(results["small_objects"][stat] / results["merged_object"][stat], 2)
        for stat in ("best_seconds", "median_seconds")
    }
    return {"input": input_summary(data), "query": query, "results": results, "small_over_merged": ratios}


# --------------------------------------------------------------------------------------------------
# reporting


def print_compact(report: dict) -> None:
    print()
    print(f"{'peer':24} {'best s':>8} {'median s':>9} {'cpu s':>7} {'rows':>10} {'files':>6} {'groups':>6} sorted")
    for name, result in report["results"].items():
        print(
            f"{name:24} {result['best_seconds']:>8.2f} {result['median_seconds']:>9.2f} "
            f"{result['median_cpu_seconds'] or float('nan'):>7.1f} {result['rows_written']:>10,} "
            f"{result['files_written']:>6} "
            f"{result['row_groups']:>6} {result['time_sorted_row_groups']}"
        )
    for name, value in report["ratios"].items():
        print(f"{name}: {value}")


def save(name: str, args, report: dict) -> None:
    path = (args.out_dir or RESULTS) / f"merge_{name}{args.tag}.json"
    write_report(path, report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["compact", "extend", "query", "memory", "all", "memory-child"])
    parser.add_argument("spec", nargs="?", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "merge")
    parser.add_argument("--out-dir", type=Path, default=None, help="where the JSON reports go (bench/results)")
    parser.add_argument("--tag", default="", help="appended to the report names: merge_<part><tag>.json")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--objects", type=int, default=2000, help="compact/query: small objects (2000)")
    parser.add_argument("--rows-per-object", type=int, default=500, help="compact/query: rows each (500)")
    parser.add_argument(
        "--peers",
        default="siltlake_deep_task,siltlake_auto_task,siltlake_deep_full,siltlake_auto_full,delta,spark,floor",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="compact: interleaved rounds of the in-process peers (best and median are reported)",
    )
    parser.add_argument("--full-repeats", type=int, default=3, help="compact: timed runs of each full path")
    parser.add_argument("--spark-repeats", type=int, default=2, help="timed runs of the naive Spark job")
    parser.add_argument("--query-repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=200, help="extend: merge rounds (200)")
    parser.add_argument("--per-round", type=int, default=10, help="extend: new small objects per round (10)")
    parser.add_argument(
        "--extend-rows-per-object",
        type=int,
        default=500,
        help="extend: rows per small object (500: a ~30 MB object after 200 rounds; 2250: ~128 MiB)",
    )
    parser.add_argument(
        "--extend-row-group-mib",
        type=int,
        default=8,
        help="extend: the table's row_group_bytes in MiB (8; the default table setting is 32)",
    )
    parser.add_argument("--memory-objects", type=int, default=1000)
    parser.add_argument("--memory-rows-per-object", type=int, default=3000)
    parser.add_argument("--spark-driver-memory", default="2g")
    args = parser.parse_args(argv)
    if args.command == "memory-child":
        memory_child(args.spec)
        return 0
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    commands = ["compact", "query", "extend", "memory"] if args.command == "all" else [args.command]
    shared = {"machine": machine(), "args": args_record(args, leave_out=("spec",))}
    spark = None
    spark_start = None
    if {"compact", "query"} & set(commands):
        print("starting spark ...", flush=True)
        spark, spark_start = start_spark("siltlake-merge-bench", spark_conf(workdir, args.spark_driver_memory))
    try:
        for command in commands:
            report = {"started_at": utc_stamp(), **shared}
            if command == "compact":
                report.update(run_compact(args, workdir, spark), spark_session_start_seconds=spark_start)
                print_compact(report)
            elif command == "query":
                report.update(run_query(args, workdir, spark))
                print(json.dumps(report["small_over_merged"]))
            elif command == "extend":
                report.update(run_extend(args, workdir))
                print(json.dumps(report["ratios"], indent=1))
            else:
                report.update(run_memory(args, workdir))
            report["finished_at"] = utc_stamp()
            save(command, args, report)
    finally:
        if spark is not None:
            spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

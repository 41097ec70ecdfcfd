"""The merge benchmark's memory part: peak RSS of one deep merge task in a fresh process."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from common import (
    MB,
    own_status_bytes,
    warm_page_cache,
)
from inputs import (
    CODEC,
    input_summary,
    object_paths,
    prepare_log_objects,
)
from merge_tasks import bare_task, run_bare

from siltlake.storage.filesystem import Storage


def memory_child(spec: str) -> None:
    """In a fresh process: one merge task, and the peak RSS it added above the process after imports."""
    options = json.loads(spec)
    lake = Storage(options["root"])
    task = bare_task(
        lake,
        options["keys"],
        options["small_bytes"],
        options["output"],
        options["mode"],
        existing_key=options.get("existing"),
    )
    # ru_maxrss carries the parent's peak across fork and exec (Linux keeps the larger of the two), so a
    # child of a big parent starts with a high-water mark it never reached. VmHWM is this process's own
    # peak; writing 5 to clear_refs resets it to the current RSS, the baseline after imports.
    Path("/proc/self/clear_refs").write_text("5")
    baseline_rss = own_status_bytes("VmRSS")
    baseline_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    outcome = run_bare(task)["ranges"][0]
    seconds = time.perf_counter() - started
    peak = own_status_bytes("VmHWM")
    print(
        json.dumps(
            {
                "baseline_rss": baseline_rss,
                "peak_rss": peak,
                "task_peak_bytes": peak - baseline_rss,
                "ru_maxrss_before": baseline_maxrss,
                "ru_maxrss_after": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "seconds": round(seconds, 3),
                "arrow_pool_peak_bytes": pa.default_memory_pool().max_memory(),
                "arrow_pool_backend": pa.default_memory_pool().backend_name,
                "outcome": outcome,
            }
        )
    )


def run_memory(args, workdir: Path) -> dict:
    data = prepare_log_objects(
        workdir, "memory", args.memory_objects, args.memory_rows_per_object, args.seed + 3, chronological=False
    )
    extra = prepare_log_objects(
        workdir, "memory-extra", 10, args.memory_rows_per_object, args.seed + 4, chronological=False
    )
    files = object_paths(data)
    warm_page_cache(files + object_paths(extra))
    out = workdir / "out" / "memory"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    first = "out/memory/merged.parquet"
    cases = [
        (
            "deep: small objects into one object",
            {
                "keys": [str(p.relative_to(workdir)) for p in files],
                "small_bytes": data["total_bytes"],
                "output": first,
                "mode": "deep",
            },
        ),
        (
            "deep: that object extended by 10 small objects",
            {
                "keys": [str(p.relative_to(workdir)) for p in object_paths(extra)],
                "small_bytes": extra["total_bytes"],
                "output": "out/memory/extended-deep.parquet",
                "mode": "deep",
                "existing": first,
            },
        ),
        (
            "auto: that object extended by 10 small objects",
            {
                "keys": [str(p.relative_to(workdir)) for p in object_paths(extra)],
                "small_bytes": extra["total_bytes"],
                "output": "out/memory/extended-auto.parquet",
                "mode": "auto",
                "existing": first,
            },
        ),
    ]
    results = []
    for label, options in cases:
        print(f"running {label} (fresh process) ...", flush=True)
        spec = json.dumps({"root": str(workdir), **options})
        child = subprocess.run(
            [sys.executable, str(Path(__file__).resolve().with_name("merge_bench.py")), "memory-child", spec],
            capture_output=True,
            text=True,
            check=True,
        )
        measured = json.loads(child.stdout.strip().splitlines()[-1])
        output = pq.read_table(workdir / options["output"])
        arrow_bytes = output.nbytes
        del output
        results.append(
            {
                "case": label,
                "mode": measured["outcome"]["mode"],
                "rows": measured["outcome"]["rows"],
                "inputs": len(options["keys"]) + (1 if "existing" in options else 0),
                "output_bytes": (workdir / options["output"]).stat().st_size,
                "merged_arrow_bytes": arrow_bytes,
                "seconds": measured["seconds"],
                "baseline_rss_bytes": measured["baseline_rss"],
                "peak_rss_bytes": measured["peak_rss"],
                "ru_maxrss_before": measured["ru_maxrss_before"],
                "ru_maxrss_after": measured["ru_maxrss_after"],
                "task_peak_bytes": measured["task_peak_bytes"],
                "task_peak_over_arrow": round(measured["task_peak_bytes"] / arrow_bytes, 3),
                "arrow_pool_peak_bytes": measured["arrow_pool_peak_bytes"],
                "arrow_pool_backend": measured["arrow_pool_backend"],
                "target_met": measured["task_peak_bytes"] <= 3 * arrow_bytes,
            }
        )
        print(
            f"  peak +{measured['task_peak_bytes'] / MB:.0f} MB over {arrow_bytes / MB:.0f} MB of merged rows "
            f"({results[-1]['task_peak_over_arrow']}x)",
            flush=True,
        )
    return {"input": input_summary(data), "codec": CODEC, "results": results}

"""Staging rows benchmark (a bounded catalog): what the periodic catalog queries cost when the catalog
holds N processed staging rows, and what pruning them costs.

Setup (not timed): a fresh deployment (SQLite catalog unless --catalog postgresql) with the table web.access, and
N processed staging rows inserted directly (a real history is registered by discovery and processed by Spark;
these queries read only the rows), registered evenly over the --history-days (30) before now: a prune deletes
those older than 7 days (23 days' worth of 30; with --history-days 8, one day's of eight, as each day of a lake
at a steady rate and the default retention does).

Timed (median of --repeats): the history sample (`siltlake.observe.history.sample`, what each daemon runs every
observe.history_interval), and `catalog.observations.staging()` (behind the metrics endpoint and `silt status`).
Then, where this siltlake prunes staging rows (siltlake.reap.staging_rows), the reap step that records the expiry
watermark (now - 7 days) and the one that prunes below it, timed once each, and the two queries again over what is
left (the 7 days' rows).

Run against another checkout's siltlake (e.g. the code before pruning) with PYTHONPATH=<checkout>:

    .venv/bin/python bench/staging_rows_bench.py --sizes 0,100000
    PYTHONPATH=../main .venv/bin/python bench/staging_rows_bench.py --sizes 0,100000 --out bench/results/x.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

from common import brief_machine, catalog_url, load_avg_1m, new_deployment, save_json, utc_stamp

from siltlake.catalog import schema as s
from siltlake.clock import utcnow
from siltlake.observe.history import sample
from siltlake.tabledef import TableDef

TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "t",
    "timezone": "UTC",
    "columns": [{"name": "t", "type": "timestamp", "nullable": False}],
}
HISTORY_DAYS = 30


def insert_processed(deployment, table_id: int, rows: int, now: dt.datetime, history: dt.timedelta) -> None:
    """N processed rows registered over the `history` before now, oldest first."""
    step = history / max(rows, 1)
    with deployment.catalog.engine.begin() as c:
        for start in range(0, rows, 5000):
            batch = []
            for i in range(start, min(rows, start + 5000)):
                received = now - history + step * i
                batch.append(
                    dict(
                        uri=f"file:///staging/host{i % 20:02d}.web.access/obj-{i:08d}.jsonl",
                        table_id=table_id,
                        size=20,
                        send_time=received,
                        receive_time=received,
                        processed_time=received + dt.timedelta(minutes=1),
                        records_in=10,
                        bad_records=0,
                    )
                )
            c.execute(s.staging_objects.insert(), batch)
        if hasattr(deployment.catalog, "add_staging_totals"):  # what registering and processing them counts
            deployment.catalog.add_staging_totals(c, {table_id: (rows, 10 * rows, 0)})


def median_ms(action, repeats: int) -> float:  # a callable
    action()  # warm: the first call pays for imports and the connection pool
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return round(statistics.median(times) * 1000, 2)


def measure(deployment, repeats: int) -> dict:  # a Deployment
    return {
        "history_sample_ms": median_ms(lambda: sample(deployment), repeats),
        "observations_staging_ms": median_ms(deployment.catalog.observations.staging, repeats),
    }


def run(kind: str, rows: int, repeats: int, workdir: Path, history_days: int = HISTORY_DAYS) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"staging-rows-{kind}-{rows}-", dir=workdir))
    with catalog_url(kind, root) as url:
        deployment = new_deployment("bench001", root, catalog_url=url)
        try:
            table = deployment.catalog.tables.create(TableDef.from_mapping(TABLE))
            now = utcnow()
            started = time.perf_counter()
            insert_processed(deployment, table.id, rows, now, dt.timedelta(days=history_days))
            result = {
                "catalog": kind,
                "rows": rows,
                "setup_seconds": round(time.perf_counter() - started, 2),
                **measure(deployment, repeats),
            }
            shown = deployment.catalog.observations.staging()[0]
            if (shown["registered"], shown["records_loaded"]) != (rows, 10 * rows):
                raise RuntimeError(f"observations.staging() shows {shown}, expected {rows} objects")
            try:
                from siltlake.reap.staging_rows import prune_staging_rows
            except ImportError:  # a siltlake before staging expiry
                return result
            # The root's full listing started now (as a stream round's would), so the watermark is now - 7 days.
            deployment.catalog.discovery.advance(deployment.staging.root, now, now)
            started = time.perf_counter()
            prune_staging_rows(deployment, now)
            result["record_watermark_ms"] = round((time.perf_counter() - started) * 1000, 2)
            started = time.perf_counter()
            result["pruned"] = prune_staging_rows(deployment, now + dt.timedelta(hours=2))
            result["prune_seconds"] = round(time.perf_counter() - started, 3)
            result["after_prune"] = measure(deployment, repeats)
            return result
        finally:
            deployment.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0,100000")
    parser.add_argument("--catalog", default="sqlite", choices=["sqlite", "postgresql"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--history-days",
        type=int,
        default=HISTORY_DAYS,
        help="days the rows were registered over (those older than 7 days are pruned)",
    )
    parser.add_argument("--out", default="bench/results/staging_rows.json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="silt-staging-rows-"))
    results = []
    for rows in (int(size) for size in args.sizes.split(",")):
        result = run(args.catalog, rows, args.repeats, workdir, args.history_days)
        print(result, flush=True)
        results.append(result)
    save_json(
        Path(args.out),
        {"when": utc_stamp(), "machine": brief_machine(), "load_avg_1m": load_avg_1m(), "results": results},
    )


if __name__ == "__main__":
    main()

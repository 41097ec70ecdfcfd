#!/usr/bin/env python
"""Change feed benchmark: the changes of one append version of a --days-day table against rescanning
the day it touched.

The table holds --days UTC days of --day-rows rows (--objects-per-day small objects a day); every past day is
closed, merged, switched and published, today stays open. One more small object of --append-rows rows is
committed today and published: that version is the one read. Peers, one run each per round:
`Table.changes(v - 1, v)` (reads the appended object only) and `Table.to_arrow(dates=[today])` (what a consumer
without a change feed rescans to find it).

    .venv/bin/python bench/changes_bench.py --days 30 --day-rows 200000 --append-rows 10000
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path

from common import (
    RESULTS,
    args_record,
    commit_small_objects,
    interleaved_runs,
    machine,
    new_deployment,
    utc_stamp,
    write_report,
)
from keyed_bench import rows_of, settle, table_def

from siltlake.lake import Lake
from siltlake.publish import publish_once


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--day-rows", type=int, default=200_000)
    parser.add_argument("--objects-per-day", type=int, default=4)
    parser.add_argument("--append-rows", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="changes-bench-"))
    try:
        deployment = new_deployment("bench", root)
        deployment.catalog.tables.create(table_def("events", keyed=False))
        today = dt.datetime.now(dt.UTC).date()
        days = [today - dt.timedelta(days=n) for n in range(args.days - 1, -1, -1)]
        per_object = args.day_rows // args.objects_per_day
        next_id = 0
        for number, day in enumerate(days):
            objects = []
            for part in range(args.objects_per_day):
                objects.append((day, rows_of(day, next_id, per_object, number * 100 + part)))
                next_id += per_object
            commit_small_objects(deployment, "web.events", objects)
        settle(deployment)
        commit_small_objects(deployment, "web.events", [(today, rows_of(today, next_id, args.append_rows, 99_999))])
        publish_once(deployment)
        table = Lake(deployment).table("web.events")
        version = table.version
        assert table.history()[-1]["op"] == "append"

        def changes(_state: object) -> dict:
            feed = table.changes(version - 1, version)
            assert feed.num_rows == args.append_rows, feed.num_rows
            return {"rows": feed.num_rows}

        def rescan(_state: object) -> dict:
            return {"rows": table.to_arrow(dates=[today]).num_rows}

        found = interleaved_runs(
            {"changes of the version": (None, changes), "rescan of its day": (None, rescan)}, args.repeats
        )
        ratio = found["rescan of its day"]["median_seconds"] / found["changes of the version"]["median_seconds"]
        found["ratio"] = round(ratio, 1)
        found["table_rows"] = args.days * per_object * args.objects_per_day + args.append_rows
        deployment.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "benchmark": "changes",
        "when": utc_stamp(),
        "machine": machine(),
        "command": " ".join(sys.argv),
        "args": args_record(args),
        **found,
    }
    write_report(RESULTS / f"changes{args.tag}.json", report)
    print({"ratio": found["ratio"], "table_rows": found["table_rows"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Readers never see a partial publish: Spark reads in a loop while publish runs close days, switch them from
live to merged objects and publish merged versions. The data never changes, only how it is shown, so every
read must count exactly the rows that were written."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter

from siltlake.deployment import Deployment
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

DAYS = [DAY + dt.timedelta(days=offset) for offset in range(6)]
OBJECTS_PER_DAY = 3
READERS = 2  # one counts the table, one counts per dt
TIMEOUT = 240


def test_reads_during_publish_runs_always_see_every_row_once(deployment: Deployment, spark) -> None:
    table = make_table(deployment, merge_batch_size=2)  # each day takes two merge jobs: two ranges
    expected: Counter = Counter()
    for day_index, date in enumerate(DAYS):
        batches = [rows_for(date, 15 + 5 * n, seed=day_index * 10 + n) for n in range(OBJECTS_PER_DAY)]
        add_small_objects(deployment, table, date, batches)
        expected[date] = sum(len(batch) for batch in batches)
    total = sum(expected.values())
    assert merge_once(deployment).failed == 0  # every live object merged: each day can switch once closed
    catalog = deployment.catalog

    def switched() -> int:
        return sum(p.switched and p.current_manifest_version > 0 for p in catalog.partitions.list(table.id))

    # Publish runs in order: live versions for every day, then each day closes in turn (the previous day
    # switches and publishes its merged version in the same run), then the last day switches.
    clocks = [tokyo(DAYS[0], 12)] + [tokyo(date + dt.timedelta(days=1), 1) for date in DAYS]
    clocks.append(clocks[-1] + dt.timedelta(hours=1))

    done = threading.Event()
    progress = threading.Condition()
    reads = [0] * READERS
    failures: list[str] = []
    seen_states: list[set[int]] = [set() for _ in range(READERS)]  # switched partitions before each read

    def count_all() -> dict:
        return {"total": read_table(spark, "web.access", deployment).count()}

    def count_per_dt() -> dict:
        rows = read_table(spark, "web.access", deployment).groupBy("dt").count().collect()
        return {row["dt"]: row["count"] for row in rows}

    checks = [(count_all, {"total": total}), (count_per_dt, dict(expected))]

    def reader(number: int) -> None:
        read, wanted = checks[number]
        try:
            while not done.is_set() and not failures:
                seen_states[number].add(switched())
                got = read()
                if got != wanted:
                    failures.append(
                        f"reader {number} read {got}, expected {wanted} ({switched()} partitions switched now)"
                    )
                with progress:
                    reads[number] += 1
                    progress.notify_all()
        except Exception as exc:  # a read that fails is a failure too, reported in the main thread
            failures.append(f"reader {number}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=reader, args=(n,), name=f"reader-{n}") for n in range(READERS)]
    deadline = time.monotonic() + TIMEOUT
    published = []
    for thread in threads:
        thread.start()
    try:
        for now in clocks:
            # Each run waits for every reader to finish a read since the last run (no sleeping), so runs land
            # while reads are planned and executed, and every intermediate state is read.
            target = [count + 1 for count in reads]
            with progress:
                while not failures and any(r < t for r, t in zip(reads, target, strict=True)):
                    assert progress.wait(timeout=max(0.0, deadline - time.monotonic())), "readers stalled"
            if failures:
                break
            published.append(publish_once(deployment, now=now))
        # Reads of the final state, too.
        target = [count + 1 for count in reads]
        with progress:
            while not failures and any(r < t for r, t in zip(reads, target, strict=True)):
                assert progress.wait(timeout=max(0.0, deadline - time.monotonic())), "readers stalled"
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=120)
    assert not failures, failures[:5]
    assert not any(thread.is_alive() for thread in threads)

    # The runs did what the test is about: every day switched, each with a merged version, none skipped.
    assert sorted(p for run in published for p in run.switched) == sorted(
        p.id for p in catalog.partitions.list(table.id)
    )
    assert len([v for run in published for v in run.merged_versions]) == len(DAYS)
    assert sum(len(run.live_versions) for run in published) == len(DAYS)
    assert switched() == len(DAYS)
    # And the readers read across the transition, not only before or after it.
    for number, states in enumerate(seen_states):
        assert {0, len(DAYS)} <= states and len(states) >= len(DAYS) // 2, (number, sorted(states))
    assert read_table(spark, "web.access", deployment).count() == total

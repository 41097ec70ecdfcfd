"""Property: whatever happens to a local staging root between discovery rounds (new files, in-place rewrites,
appends, files moved in with old mtimes), once a whole sweep pass has run after the last change, every file's
current state (size and mtime) was asked of the catalog by some round, although a pass asks only about files
changed since the last completed pass (docs/design.md, "What a pass looks up")."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.clock import to_naive_utc
from siltlake.deployment import Deployment
from siltlake.storage.localwalk import listed_mtime
from siltlake.stream.discover import discover
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config

DAYS = ["host00.web.access/2026/01/01", "host00.web.access/2026/01/02", "host01.web.access/2026/01/02"]
OLD = dt.datetime(2026, 1, 2, tzinfo=dt.UTC).timestamp()
LINE = b'{"t":"2026-01-01"}\n'

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.integers(0, len(DAYS) - 1)),
        st.tuples(st.just("rewrite"), st.integers(0, 50)),
        st.tuples(st.just("append"), st.integers(0, 50)),
        st.tuples(st.just("move_in_old"), st.integers(0, len(DAYS) - 1)),
        st.tuples(st.just("round"), st.just(0)),
    ),
    min_size=1,
    max_size=14,
)


def tick() -> None:
    """Past the kernel's coarse file times: what is written next is stamped after the round before it."""
    time.sleep(0.02)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_after_a_whole_pass_every_files_current_state_was_looked_up(steps: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        # A sweep of 3 files a round: passes span several rounds, so changes land before, in and behind them.
        deployment = Deployment(
            make_config(directory, f"sqlite:///{directory / 'catalog.db'}", listing_margin=0, sweep_files_per_round=3)
        )
        deployment.init()
        try:
            run(deployment, directory, steps)
        finally:
            deployment.close()


def run(deployment: Deployment, directory: Path, steps: list[tuple[str, int]]) -> None:
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    staging = deployment.staging
    looked_up: set[tuple[str, dt.datetime | None, int]] = set()
    asked = deployment.catalog.staging.sort_listed

    def recording(listed, resized=None, **options):  # sort_listed's own
        looked_up.update(listed)
        return asked(listed, resized, **options)

    deployment.catalog.staging.sort_listed = recording
    names = itertools.count()
    files: list[str] = []

    def put(key: str, data: bytes) -> None:
        path = Path(staging.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        files.append(key)

    for day in DAYS:
        put(f"{day}/first-{next(names)}.jsonl", LINE)
    tick()
    discover(deployment)  # the root's first round: a full listing, every file looked up
    tick()
    for step, value in steps:
        if step == "new":
            put(f"{DAYS[value]}/new-{next(names)}.jsonl", LINE)
        elif step == "rewrite":  # in place, same size: only the file's own times change
            with open(staging.path(files[value % len(files)]), "r+b") as handle:
                handle.write(b'{"t":"2026-01-02"}\n')
        elif step == "append":
            with open(staging.path(files[value % len(files)]), "ab") as handle:
                handle.write(LINE)
        elif step == "move_in_old":  # an old mtime; the rename sets its ctime
            outside = directory / f"outside-{next(names)}.jsonl"
            outside.write_bytes(LINE)
            os.utime(outside, (OLD, OLD))
            key = f"{DAYS[value]}/moved-{next(names)}.jsonl"
            os.rename(outside, staging.path(key))
            files.append(key)
        else:
            discover(deployment)
        tick()
    completed = 0
    while completed < 2:  # the pass under way, then a whole pass that started after the last change
        completed += discover(deployment).sweep_completed
        tick()
    for key in files:
        found = os.stat(staging.path(key))
        state = (staging.uri(key), to_naive_utc(listed_mtime(found.st_mtime_ns)), found.st_size)
        assert state in looked_up, f"{key}'s current state (size {found.st_size}) was never asked of the catalog"

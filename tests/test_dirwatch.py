"""A stream daemon's record kept current by inotify (storage/dirwatch.py): a changed leaf directory it has read is
not listed again, what arrived is found from the kernel's notifications, exactly once, and whatever may have been
missed (a recorded name removed, an overflowed queue, a failed round) sends the walk back to listing."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.deployment import Deployment
from siltlake.storage.accounted import AccountedNames
from siltlake.storage.dirwatch import WatchedNames, inotify_available
from siltlake.storage.localwalk import walk_changed
from siltlake.stream.discover import discover
from siltlake.stream.names import daemon_names
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config

pytestmark = pytest.mark.skipif(not inotify_available(), reason="inotify is Linux's: no watched record here")
HOUR_NS = 3600 * 10**9


class Rounds:
    """Walks of one root with a watched record, as a daemon's discovery rounds make them: each from the start of
    the one before, the record kept only when the round completes. Counts the listings of leaf directories (the
    directories above them are read for their subdirectories, as in any walk)."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, record: WatchedNames | None = None) -> None:
        self.root, self.record, self.since, self.listings = root, record or WatchedNames(), 0, 0
        listdir, scandir = os.listdir, os.scandir

        def counted_listdir(path: str = ".") -> list[str]:
            self._count(path)
            return listdir(path)

        def counted_scandir(path: str = "."):  # os.ScandirIterator
            self._count(path)
            return scandir(path)

        monkeypatch.setattr(os, "listdir", counted_listdir)
        monkeypatch.setattr(os, "scandir", counted_scandir)

    def _count(self, path: str) -> None:
        if os.stat(path).st_nlink == 2:
            self.listings += 1

    def walk(self, keep: bool = True) -> list[str]:
        time.sleep(0.02)  # what was written before this round has a ctime before its start
        started, self.listings = time.time_ns(), 0
        found = walk_changed(str(self.root), self.since, self.record)
        if keep:
            self.record.keep(found.directories, time.time_ns(), HOUR_NS)
            self.since = started
        time.sleep(0.02)
        return sorted(info.key for info in found.objects)


def leaf(tmp_path: Path, names: int = 3) -> tuple[Path, Path]:
    root = tmp_path / "staging"
    day = root / "host01.web.access" / "2026" / "12" / "01"
    day.mkdir(parents=True)
    for i in range(names):
        (day / f"obj-{i}.jsonl").write_text("{}\n")
    return root, day


def key(day: Path, name: str) -> str:
    return f"host01.web.access/2026/12/01/{name}"


def answering(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Rounds, Path]:
    """A leaf directory after the two rounds that make its watch answer: one recording it, one listing it again
    under the new watch (its file a.jsonl)."""
    root, day = leaf(tmp_path)
    rounds = Rounds(root, monkeypatch)
    rounds.walk()
    (day / "a.jsonl").write_text("{}\n")
    rounds.walk()
    return rounds, day


def test_what_arrives_in_a_watched_directory_is_found_without_listing_it(tmp_path: Path, monkeypatch) -> None:
    root, day = leaf(tmp_path)
    rounds = Rounds(root, monkeypatch)
    assert rounds.walk() == [key(day, f"obj-{i}.jsonl") for i in range(3)]
    (day / "a.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "a.jsonl")]  # listed once more: the watch was set just before
    assert rounds.record.watching == 1
    # A new file, a shipper's temporary name renamed into place, a hard link and a symbolic link.
    (day / "b.jsonl").write_text("{}\n")
    (day / ".c.jsonl.tmp").write_text("{}\n")
    os.rename(day / ".c.jsonl.tmp", day / "c.jsonl")
    os.link(day / "obj-0.jsonl", day / "d-link.jsonl")
    os.symlink("obj-1.jsonl", day / "e-symlink.jsonl")
    got = rounds.walk()
    assert got == [key(day, name) for name in ("b.jsonl", "c.jsonl", "d-link.jsonl", "e-symlink.jsonl")]
    assert rounds.listings == 0
    assert rounds.record.names == 8
    assert rounds.walk() == [] and rounds.listings == 0  # the directory did not change: not even looked at


def test_a_file_put_between_the_watch_and_the_listing_is_found_once(tmp_path: Path, monkeypatch) -> None:
    root, day = leaf(tmp_path)

    class Racing(WatchedNames):
        def arm(self, path: str) -> None:
            super().arm(path)
            (day / f"raced-{self.watching}.jsonl").write_text("{}\n")  # after the watch, before the listing

    rounds = Rounds(root, monkeypatch, Racing())
    first = rounds.walk()
    (day / "a.jsonl").write_text("{}\n")
    second, third = rounds.walk(), rounds.walk()
    assert key(day, "raced-1.jsonl") in first + second
    assert sorted(first + second + third) == sorted({*first, *second, *third})  # none twice
    assert set(first + second + third) == {key(day, p.name) for p in day.iterdir()}
    (day / "b.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "b.jsonl")] and rounds.listings == 0


def test_a_recorded_name_removed_sends_the_walk_back_to_listing(tmp_path: Path, monkeypatch) -> None:
    rounds, day = answering(tmp_path, monkeypatch)
    (day / "obj-1.jsonl").unlink()  # a recorded name: only a listing says what remains
    (day / "b.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "b.jsonl")] and rounds.listings == 1
    assert rounds.record.names == 4
    (day / ".c.tmp").write_text("{}\n")  # a name that arrived and went again is no reason to list
    (day / ".c.tmp").unlink()
    (day / "c.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "c.jsonl")] and rounds.listings == 0


def test_a_failed_round_keeps_what_arrived_for_the_next(tmp_path: Path, monkeypatch) -> None:
    rounds, day = answering(tmp_path, monkeypatch)
    (day / "b.jsonl").write_text("{}\n")
    assert rounds.walk(keep=False) == [key(day, "b.jsonl")]  # found, then the round failed: nothing recorded
    (day / "c.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "b.jsonl"), key(day, "c.jsonl")] and rounds.listings == 0


def test_an_overflowed_queue_sends_every_watched_directory_back_to_listing(tmp_path: Path, monkeypatch) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 70_000:
        pytest.skip(f"fs.inotify.max_queued_events is {limit}: too many files to overflow it in a test")
    rounds, day = answering(tmp_path, monkeypatch)
    for i in range(limit + 10):  # more events than the kernel queues
        (day / f"burst-{i:06d}").touch()
    got = rounds.walk()
    assert rounds.listings == 1 and len(got) == limit + 10
    (day / "b.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "b.jsonl")] and rounds.listings == 0


def test_a_directory_that_gains_a_subdirectory_or_is_replaced_is_listed(tmp_path: Path, monkeypatch) -> None:
    rounds, day = answering(tmp_path, monkeypatch)
    (day / "late").mkdir()
    (day / "late" / "x.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "late/x.jsonl")]  # no longer a leaf: read whole, and its subdirectory
    shutil.rmtree(day)
    day.mkdir()
    (day / "y.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "y.jsonl")]
    (day / "z.jsonl").write_text("{}\n")
    rounds.walk()
    (day / "w.jsonl").write_text("{}\n")
    assert rounds.walk() == [key(day, "w.jsonl")] and rounds.listings == 0


OPERATIONS = st.lists(
    st.sampled_from(["put", "rename-in", "link", "reput-recorded", "remove-recorded", "remove-new", "fail", "round"]),
    min_size=1,
    max_size=14,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=OPERATIONS)
def test_every_file_is_found_exactly_once_whatever_happens_between_rounds(
    operations: list[str], tmp_path: Path, monkeypatch
) -> None:
    """No name lost, none found twice: the invariant discovery's catalog relies on (it would register a name
    found twice once, but a lost one never)."""
    root = tmp_path / f"example-{time.time_ns()}"
    root, day = leaf(root, names=2)
    rounds = Rounds(root, monkeypatch)
    found: list[str] = rounds.walk()
    recorded_before = set(found)
    for serial, operation in enumerate([*operations, "round"]):
        name = f"n{serial:03d}.jsonl"
        if operation == "put":
            (day / name).write_text("{}\n")
        elif operation == "rename-in":
            (day / f".{name}.tmp").write_text("{}\n")
            os.rename(day / f".{name}.tmp", day / name)
        elif operation == "link":
            os.link(day / "obj-0.jsonl", day / name)
        elif operation == "reput-recorded":  # a file renamed over a recorded name: left to the sweep, not found again
            targets = sorted(p for p in day.iterdir() if key(day, p.name) in recorded_before)
            if targets:
                (day / f".{name}.tmp").write_text("{}\n")
                os.rename(day / f".{name}.tmp", targets[-1])
        elif operation == "remove-recorded":
            victims = sorted(
                p for p in day.iterdir() if key(day, p.name) in recorded_before and p.name != "obj-0.jsonl"
            )
            if victims:
                victims[0].unlink()
        elif operation == "remove-new":
            fresh = sorted(p for p in day.iterdir() if key(day, p.name) not in found)
            if fresh:
                fresh[-1].unlink()
        elif operation == "fail":
            rounds.walk(keep=False)
        else:
            found += rounds.walk()
            recorded_before = set(found)
    assert len(found) == len(set(found)), "a file was found twice"
    present = {key(day, p.name) for p in day.iterdir()}
    assert present <= set(found), f"lost: {sorted(present - set(found))}"


@settings(max_examples=60, deadline=None)
@given(
    record=st.lists(st.text("abc.", min_size=1, max_size=4), unique=True, max_size=40),
    arrivals=st.lists(st.sets(st.text("abc.", min_size=1, max_size=4), max_size=6), min_size=1, max_size=4),
    colliding=st.booleans(),
)
def test_a_watched_records_index_answers_as_a_search_of_the_record_does(
    record: list[str], arrivals: list[set[str]], colliding: bool
) -> None:
    """Round after round (the record growing by what was new), the arrivals the hash index calls new are exactly
    those the record's text lacks; with every hash equal (all collide) the text decides."""
    watched, plain = WatchedNames(), AccountedNames()
    try:
        if colliding:
            import siltlake.storage.dirwatch as dirwatch

            original, dirwatch._hashes = dirwatch._hashes, lambda names: np.zeros(len(names), dtype=np.int64)
        known = "/".join(record)
        for names in arrivals:
            lacking = watched.lacking("/d", known, set(names))
            held = set(known.split("/")) if known else set()
            assert lacking == plain.lacking("/d", known, set(names)) == set(names) - held
            known = "/".join([known, *sorted(lacking)] if known else sorted(lacking))
    finally:
        if colliding:
            dirwatch._hashes = original
        watched.close()


@pytest.fixture
def lake(tmp_path: Path, catalog_url: str) -> Deployment:
    deployment = Deployment(make_config(tmp_path, catalog_url, listing_margin=0))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    yield deployment
    deployment.close()


def put(deployment: Deployment, key_: str) -> None:
    path = Path(deployment.staging.path(key_))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"t":"2026-12-01"}\n')


def test_a_daemons_rounds_register_what_arrives_once_with_its_watched_record(lake: Deployment) -> None:
    day = "host01.web.access/2026/12/01"
    for i in range(4):
        put(lake, f"{day}/obj-{i}.jsonl")
    time.sleep(0.02)
    assert discover(lake).registered == 4  # the root's first round: listed whole, no record
    record = daemon_names(lake)
    assert isinstance(record, WatchedNames)
    try:
        counts = []
        for batch in range(4):
            time.sleep(0.02)
            for i in range(3):
                put(lake, f"{day}/new-{batch}-{i}.jsonl")
            time.sleep(0.02)
            found = discover(lake, record)
            counts.append((found.registered, found.remembered))
        assert [registered for registered, _ in counts] == [3, 3, 3, 3]
        assert record.watching == 1 and record.names == 16
    finally:
        record.close()


def test_without_watch_directories_a_daemon_keeps_the_listed_record(tmp_path: Path, catalog_url: str) -> None:
    deployment = Deployment(make_config(tmp_path, catalog_url, watch_directories=False))
    try:
        record = daemon_names(deployment)
        assert type(record) is AccountedNames
    finally:
        deployment.close()

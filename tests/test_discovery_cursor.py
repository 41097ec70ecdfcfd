"""Discovery of a local staging root through its cursor: a round reads what changed since the last listing,
never loses an object put late (under an old date, with an old mtime, moved in) and registers each once.

The rule and its limits: docs/design.md, "Staging objects"."""

from __future__ import annotations

import datetime as dt
import importlib
import os
import shutil
import time
import zlib
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.storage.accounted import AccountedNames, DirectoryNames
from siltlake.stream.discover import discover
from siltlake.stream.names import StoredNames
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config

# The module (siltlake.stream exports its function under the same name), whose clock a test moves.
discover_module = importlib.import_module("siltlake.stream.discover")
OLD = dt.datetime(2026, 1, 2, tzinfo=dt.UTC).timestamp()
DAYS = [f"host{host:02d}.web.access/2026/01/{day:02d}" for host in range(3) for day in (1, 2)]
SWEEP = 8


@pytest.fixture
def lake(tmp_path: Path, catalog_url: str) -> Deployment:
    """A deployment with the access table, whose cursor stays exactly at the start of a listing (margin 0: the
    test's writes do not race its rounds), a staging root of 6 day directories of 5 objects each, and a rolling
    sweep of SWEEP files a round (a pass: 4 rounds)."""
    deployment = Deployment(make_config(tmp_path, catalog_url, listing_margin=0, sweep_files_per_round=SWEEP))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    for directory in DAYS:
        for i in range(5):
            put(deployment, f"{directory}/obj-{i}.jsonl")
    yield deployment
    deployment.close()


def put(deployment: Deployment, key: str, data: bytes = b'{"t":"2026-01-01"}\n') -> Path:
    path = Path(deployment.staging.path(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def settle() -> None:
    """Let the clock pass what was just written: the next round's start is after every ctime so far."""
    time.sleep(0.02)


def first_round(deployment: Deployment) -> None:
    settle()
    found = discover(deployment)
    assert found.full_listing and found.registered == 30 and found.listed == 30
    settle()


def test_an_idle_round_after_the_first_lists_only_its_sweep_slice_and_looks_nothing_up(lake: Deployment) -> None:
    first_round(lake)
    for _ in range(2):
        idle = discover(lake)
        assert not idle.full_listing
        assert idle.listed == idle.swept == idle.sweep_unchanged == SWEEP  # the walk listed nothing
        # The slice's files are as the first round's full listing saw them: none is asked of the catalog.
        assert (idle.looked_up, idle.registered, idle.redelivered) == (0, 0, 0)
    changed = lake.staging.list_changed(time.time_ns())
    assert changed.entries == 0 and changed.skipped == len(DAYS)  # the day directories were not even read


def test_a_new_object_is_looked_up_alone(lake: Deployment) -> None:
    first_round(lake)
    put(lake, "host02.web.access/2026/01/02/new.jsonl")  # past this round's sweep slice
    found = discover(lake)
    assert not found.full_listing
    # The changed directory's 6 entries; of those, only the new one looked up (the sweep's slice is unchanged).
    assert (found.listed - found.swept, found.looked_up, found.registered) == (6, 1, 1)
    assert discover(lake).registered == 0


def test_late_objects_under_old_dates_with_old_times_are_found_once(lake: Deployment, tmp_path: Path) -> None:
    first_round(lake)
    late = put(lake, "host01.web.access/2026/01/01/late.jsonl")
    os.utime(late, (OLD, OLD))
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b'{"t":"2026-01-01"}\n')
    os.utime(outside, (OLD, OLD))
    os.rename(outside, lake.staging.path("host02.web.access/2026/01/02/moved.jsonl"))  # keeps its old mtime
    # A whole day moved in, its directory's and file's times old: only its own ctime says it is new.
    day = tmp_path / "day"
    day.mkdir()
    (day / "obj.jsonl").write_bytes(b'{"t":"2026-01-03"}\n')
    os.utime(day / "obj.jsonl", (OLD, OLD))
    os.utime(day, (OLD, OLD))
    os.rename(day, lake.staging.path("host00.web.access/2026/01/03"))
    # A new link (inside the root: an ordinary object) to an old file: the link's own ctime is new.
    os.symlink("obj-0.jsonl", lake.staging.path("host02.web.access/2026/01/01/link.jsonl"))
    found = discover(lake)
    assert not found.full_listing and found.registered == 4 and found.unknown == 0
    assert discover(lake).registered == 0
    uris = {
        lake.staging.uri(key)
        for key in (
            "host01.web.access/2026/01/01/late.jsonl",
            "host02.web.access/2026/01/02/moved.jsonl",
            "host00.web.access/2026/01/03/obj.jsonl",
            "host02.web.access/2026/01/01/link.jsonl",
        )
    }
    assert uris <= lake.catalog.staging.known_uris(sorted(uris))


def test_an_object_put_during_a_round_is_found_by_the_next(lake: Deployment, monkeypatch) -> None:
    first_round(lake)
    original = type(lake.staging).list_changed

    def racing(storage, since_ns, *record):
        put(lake, "host00.web.access/2026/01/01/before-walk.jsonl")
        listing = original(storage, since_ns, *record)
        put(lake, "host01.web.access/2026/01/01/after-walk.jsonl")
        return listing

    monkeypatch.setattr(type(lake.staging), "list_changed", racing)
    racing_round = discover(lake).registered
    monkeypatch.undo()
    settle()
    assert racing_round + discover(lake).registered == 2
    assert discover(lake).registered == 0


def rewrite_in_place(deployment: Deployment, key: str) -> None:
    """Rewrite a file in place, its size kept: no directory changes, so the cursor walk cannot see it."""
    path = Path(deployment.staging.path(key))
    with open(path, "r+b") as rewrite:
        rewrite.write(b'{"t":"2026-01-05"}\n')
    later = dt.datetime.now(dt.UTC).timestamp() + 60
    os.utime(path, (later, later))


def test_the_sweep_finds_an_in_place_rewrite_within_one_pass_and_completes_it(lake: Deployment) -> None:
    first_round(lake)
    cursors, root = lake.catalog.discovery, lake.staging.root
    first_listing = cursors.get(root).full_listing_time
    # Keys sort host00.../01, host00.../02, host01...: this one is the 23rd of 30, in the pass's third slice.
    rewrite_in_place(lake, "host02.web.access/2026/01/01/obj-2.jsonl")
    rounds = [discover(lake)]
    pass_started = cursors.get(root).sweep_started  # the first slice's round began the pass
    rounds += [discover(lake) for _ in range(3)]
    assert [found.swept for found in rounds] == [8, 8, 8, 6]
    assert [found.redelivered for found in rounds] == [0, 0, 1, 0]
    assert [found.sweep_completed for found in rounds] == [False, False, False, True]
    assert sum(found.registered for found in rounds) == 0
    cursor = cursors.get(root)
    assert first_listing < pass_started == cursor.full_listing_time  # a completed pass: a full listing
    assert cursor.sweep_after is None and cursor.sweep_started > pass_started  # the next pass, from the start
    following = [discover(lake) for _ in range(3)]  # the next pass, not completed yet
    assert [found.swept for found in following] == [8, 8, 8]
    assert sum(found.redelivered for found in following) == 0  # the rewrite was reported once
    assert cursors.get(root).full_listing_time == pass_started


def test_an_incomplete_pass_leaves_the_full_listing_time(lake: Deployment) -> None:
    first_round(lake)
    root = lake.staging.root
    first_listing = lake.catalog.discovery.get(root).full_listing_time
    discover(lake)
    started = lake.catalog.discovery.get(root).sweep_started
    for _ in range(2):
        discover(lake)
        cursor = lake.catalog.discovery.get(root)
        assert cursor.full_listing_time == first_listing and cursor.sweep_started == started
    assert discover(lake).sweep_completed
    assert lake.catalog.discovery.get(root).full_listing_time == started


def test_a_failed_round_leaves_the_sweep_where_it_was(lake: Deployment, monkeypatch) -> None:
    first_round(lake)
    root = lake.staging.root
    discover(lake)
    before = lake.catalog.discovery.get(root)
    assert before.sweep_after == "host00.web.access/2026/01/02/obj-2.jsonl"  # the 8th key

    def failing(*args, **kwargs):
        raise RuntimeError("catalog lost")

    monkeypatch.setattr(type(lake.catalog.discovery), "advance", failing)  # the walk's cursor goes first
    with pytest.raises(RuntimeError):
        discover(lake)
    monkeypatch.undo()
    after = lake.catalog.discovery.get(root)
    assert (after.sweep_after, after.sweep_started) == (before.sweep_after, before.sweep_started)
    discover(lake)
    assert lake.catalog.discovery.get(root).sweep_after == "host01.web.access/2026/01/02/obj-0.jsonl"  # 16th


def test_a_sweep_pass_looks_every_file_up_once_the_check_interval_has_passed(tmp_path: Path, catalog_url: str) -> None:
    """The passes between checks look up only files changed since the last completed pass; one that starts
    stream.sweep_check_interval after the last listing that looked everything up looks up every file (what a
    file system that sets no ctime on rename would hide from the others), and the next passes skip again."""
    deployment = Deployment(
        make_config(tmp_path, catalog_url, listing_margin=0, sweep_files_per_round=SWEEP, sweep_check_interval=2)
    )
    deployment.init()
    try:
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        for directory in DAYS:
            for i in range(5):
                put(deployment, f"{directory}/obj-{i}.jsonl")
        first_round(deployment)  # looks every file up: the check interval starts here

        def one_pass(wait_before_the_last: float = 0) -> list[tuple[int, int]]:
            """The rounds of one pass (4: 30 files, 8 a round); the round that completes it starts the next."""
            rounds = []
            for number in range(4):
                if number == 3:
                    time.sleep(wait_before_the_last)
                found = discover(deployment)
                rounds.append((found.swept, found.looked_up))
                assert found.sweep_completed == (number == 3)
            return rounds

        # Started within the interval: nothing asked; its last round, past the interval, starts the next pass.
        assert one_pass(wait_before_the_last=2.1) == [(8, 0), (8, 0), (8, 0), (6, 0)]
        assert one_pass() == [(8, 8), (8, 8), (8, 8), (6, 6)]  # started past the interval: every file asked
        assert one_pass() == [(8, 0), (8, 0), (8, 0), (6, 0)]  # the checked pass restarted the interval
    finally:
        deployment.close()


def test_with_no_check_interval_every_pass_looks_every_file_up(tmp_path: Path, catalog_url: str) -> None:
    deployment = Deployment(
        make_config(tmp_path, catalog_url, listing_margin=0, sweep_files_per_round=SWEEP, sweep_check_interval=0)
    )
    deployment.init()
    try:
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        put(deployment, "host00.web.access/2026/01/01/obj-0.jsonl")
        first_round_found = discover(deployment)
        assert first_round_found.registered == 1
        settle()
        idle = discover(deployment)
        assert (idle.swept, idle.sweep_unchanged, idle.looked_up) == (1, 0, 1)
    finally:
        deployment.close()


def test_what_the_walk_and_the_sweep_both_find_is_registered_once(lake: Deployment) -> None:
    first_round(lake)
    new = [
        "host00.web.access/2026/01/01/a-new.jsonl",
        "host01.web.access/2026/01/01/z-new.jsonl",
        "host02.web.access/2026/01/02/obj-9.jsonl",
    ]
    registered = 0
    for key in new:  # each put ahead of the sweep, where the walk also finds it
        put(lake, key)
        settle()
        registered += discover(lake).registered
    for _ in range(6):  # the rest of the pass and the next: all known
        registered += discover(lake).registered
    assert registered == len(new)
    uris = [lake.staging.uri(info.key) for info in lake.staging.list()]
    assert len(uris) == 33 and set(uris) == lake.catalog.staging.known_uris(sorted(uris))


def test_a_round_can_leave_its_sweep_slice_for_later_and_the_slice_skips_what_the_walk_found(lake: Deployment) -> None:
    first_round(lake)
    root = lake.staging.root
    before = lake.catalog.discovery.get(root)
    rewrite_in_place(lake, "host00.web.access/2026/01/01/obj-1.jsonl")  # in the first slice
    new = "host00.web.access/2026/01/02/obj-0a.jsonl"  # the walk's (its directory changed), in the first slice too
    put(lake, new)
    walked = discover(lake, sweep=False)
    assert (walked.listed, walked.registered, walked.redelivered, walked.swept) == (6, 1, 0, 0)
    assert walked.sweep_pending is not None and walked.sweep_pending.walked == {new}
    cursor = lake.catalog.discovery.get(root)
    assert cursor.cursor_time > before.cursor_time  # the walk's cursor moved; the sweep's position did not
    assert (cursor.sweep_after, cursor.sweep_started) == (before.sweep_after, before.sweep_started)
    swept = discover_module.sweep_slice(lake, walked.sweep_pending)
    assert (swept.swept, swept.registered, swept.redelivered) == (SWEEP, 0, 1)  # the rewrite; the new key not asked
    assert swept.looked_up == 1  # the rewritten file alone: the new one was the walk's, the rest are unchanged
    walked.add_sweep(swept)
    assert (walked.listed, walked.swept, walked.registered, walked.redelivered) == (6 + SWEEP, SWEEP, 1, 1)
    assert lake.catalog.discovery.get(root).sweep_after == "host00.web.access/2026/01/02/obj-1.jsonl"


def test_the_sweep_reads_the_root_in_key_order_as_list_does(tmp_path: Path) -> None:
    from siltlake.storage.filesystem import Storage

    staging = Storage(str(tmp_path / "root"))
    for key in ("a/x", "a-b", "a0", "a/b/c", "b/1", "b/2/3", "c", "d/e/f/g", "d/e0"):
        path = Path(staging.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(key.encode())
    os.symlink(staging.path("b"), staging.path("linked"))  # a link to a directory is followed, as list() does
    os.symlink("c", staging.path("c-link"))
    os.mkfifo(staging.path("fifo"))  # no file: skipped, as list() does
    listed = sorted(staging.list(), key=lambda info: info.key)
    for limit in (1, 2, 3, 100):
        swept, after = [], None
        while True:
            part = staging.sweep(after, limit)
            assert len(part.objects) <= limit
            swept.extend(part.objects)
            if part.complete:
                break
            after = part.last_key
        assert swept == listed
    assert [info.key for info in staging.sweep("a/x", 3).objects] == ["a0", "b/1", "b/2/3"]
    assert [info.key for info in staging.sweep("d/e0", 5).objects] == ["linked/1", "linked/2/3"]
    end = staging.sweep("linked/2/3", 5)
    assert end.complete and end.objects == [] and end.last_key is None


def test_a_slice_resumes_in_a_large_directory_without_reading_it_again_and_sees_what_changed_there(
    tmp_path: Path, monkeypatch
) -> None:
    from siltlake.storage import localwalk
    from siltlake.storage.filesystem import Storage

    monkeypatch.setattr(localwalk, "_KEPT_FROM", 4)  # a "large" directory: 4 entries or more
    monkeypatch.setattr(localwalk, "_SETTLED_NS", 0)  # kept even though it changed a moment ago
    monkeypatch.setattr(localwalk, "_SORTED", localwalk.OrderedDict())
    staging = Storage(str(tmp_path / "root"))
    day = Path(staging.path("host/2026/01/02"))
    day.mkdir(parents=True)
    for number in range(10):
        (day / f"obj-{number}").write_bytes(b"x")
    time.sleep(0.01)  # the directory's times before the first read
    reads = []
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: reads.append(path) or scandir(path))
    first = staging.sweep(None, 4)
    assert [info.key.rsplit("/", 1)[1] for info in first.objects] == ["obj-0", "obj-1", "obj-2", "obj-3"]
    reads.clear()
    second = staging.sweep(first.last_key, 4)
    assert [info.key.rsplit("/", 1)[1] for info in second.objects] == ["obj-4", "obj-5", "obj-6", "obj-7"]
    assert str(day) not in reads, "the day's sorted entries were kept from the slice before"

    (day / "obj-0").unlink()  # the directory changes: read again, and the file put after the cursor is found
    (day / "obj-75").write_bytes(b"x")
    third = staging.sweep(second.last_key, 4)
    assert [info.key.rsplit("/", 1)[1] for info in third.objects] == ["obj-75", "obj-8", "obj-9"]
    assert str(day) in reads and third.complete


def test_the_cursor_never_moves_back(lake: Deployment) -> None:
    cursors = lake.catalog.discovery
    root = lake.staging.root
    assert cursors.get(root) is None
    cursors.advance(root, dt.datetime(2026, 1, 2), dt.datetime(2026, 1, 2))
    cursors.advance(root, dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1))  # a slower, older listing
    cursors.advance(root, dt.datetime(2026, 1, 3), None)
    cursor = cursors.get(root)
    assert (cursor.cursor_time, cursor.full_listing_time) == (dt.datetime(2026, 1, 3), dt.datetime(2026, 1, 2))


def reput(deployment: Deployment, key: str, tmp_path: Path) -> None:
    """Put a key again by moving a file with its bytes over it (a shipper's atomic re-put of the same object, a
    redelivery): its directory changes, and its ctime and mtime are new. (Other bytes put at a name before its
    first delivery read it are another file, judged after that delivery: tests/test_first_deliveries.py.)"""
    path = Path(deployment.staging.path(key))
    replacement = tmp_path / "replacement"
    replacement.write_bytes(path.read_bytes())
    os.replace(replacement, path)


def test_a_daemon_round_stats_only_the_names_its_record_has_not_seen(lake: Deployment, tmp_path: Path) -> None:
    first_round(lake)
    day = "host02.web.access/2026/01/02"
    accounted = AccountedNames()
    put(lake, f"{day}/a-new.jsonl", b'{"t":"2026-01-04"}\n')
    found = discover(lake, accounted)  # no record yet: the changed directory is read whole
    assert (found.registered, found.remembered, found.listed - found.swept) == (1, 0, 6)
    assert (accounted.directories, accounted.names) == (1, 6)
    settle()
    # Another new object, a new link to an old file, and a re-put over a name the record holds, all in it.
    put(lake, f"{day}/b-new.jsonl", b'{"t":"2026-01-03"}\n')
    os.symlink("obj-0.jsonl", lake.staging.path(f"{day}/c-link.jsonl"))
    reput(lake, f"{day}/obj-1.jsonl", tmp_path)
    found = discover(lake, accounted)
    assert (found.registered, found.remembered, found.listed - found.swept) == (2, 6, 8)
    assert found.redelivered == 0  # obj-1 was not `stat`ed: a record round leaves a re-put to the sweep
    assert accounted.names == 8
    # The rest of the sweep's pass (33 files, 8 a round: host02.../02/obj-1 is the 29th key) reports it.
    rest = [discover(lake, accounted) for _ in range(3)]
    assert [part.sweep_completed for part in rest] == [False, False, True]
    assert [part.redelivered for part in rest] == [0, 1, 0] and sum(part.registered for part in rest) == 0


def test_a_one_off_runs_record_is_stored_in_the_catalog_and_spares_the_next_run_its_stats(
    lake: Deployment, tmp_path: Path, catalog_url: str
) -> None:
    first_round(lake)
    day = "host02.web.access/2026/01/02"
    directory = lake.staging.path(day)
    idle = StoredNames(lake)
    discover(lake, idle)
    idle.store()
    assert idle.recorded() == {} and lake.catalog.discovery.recorded_names(lake.staging.root) == {}  # nothing read
    settle()
    put(lake, f"{day}/a-new.jsonl", b'{"t":"2026-01-04"}\n')
    record = StoredNames(lake)
    found = discover(lake, record)  # nothing stored yet: the changed directory is read whole
    record.store()
    assert (found.registered, found.remembered, found.listed - found.swept) == (1, 0, 6)
    stored = lake.catalog.discovery.recorded_names(lake.staging.root)
    assert list(stored) == [directory]
    assert sorted(stored[directory].files.split("/")) == ["a-new.jsonl"] + [f"obj-{i}.jsonl" for i in range(5)]
    settle()
    put(lake, f"{day}/b-new.jsonl", b'{"t":"2026-01-03"}\n')
    reput(lake, f"{day}/obj-1.jsonl", tmp_path)
    other = Deployment(make_config(tmp_path, catalog_url, listing_margin=0, sweep_files_per_round=SWEEP))
    try:  # the next run: another process, another deployment object
        record = StoredNames(other)
        found = discover(other, record)
        record.store()
    finally:
        other.close()
    # Only b-new `stat`ed: the re-put under a stored name is the sweep's, as with a daemon's record.
    assert (found.registered, found.remembered, found.redelivered) == (1, 6, 0)
    assert len(lake.catalog.discovery.recorded_names(lake.staging.root)[directory].files.split("/")) == 7
    shutil.rmtree(directory)
    settle()
    put(lake, "host01.web.access/2026/01/01/c-new.jsonl")  # a round that reads a directory forgets the removed one
    record = StoredNames(lake)
    assert discover(lake, record).registered == 1
    record.store()
    stored = lake.catalog.discovery.recorded_names(lake.staging.root)
    assert directory not in stored  # gone; the directories read (the new file's, the removed one's parent) stay
    assert set(stored) == {
        lake.staging.path("host01.web.access/2026/01/01"),
        lake.staging.path("host02.web.access/2026/01"),
    }


def test_a_record_of_names_stored_by_an_earlier_version_is_read_and_stored_anew(lake: Deployment) -> None:
    """Records are zstd frames now; one an earlier version stored (a zlib stream) still reads, and is written
    back in the new form once its directory changes."""
    import sqlalchemy as sa

    from siltlake.catalog import schema_discovery as s

    discovery, root = lake.catalog.discovery, lake.staging.root
    names = "/".join(f"obj-{i}.jsonl" for i in range(2000)) + "/é-ß.jsonl"
    written = {"/old": DirectoryNames((1, 2, 2), 10, names), "/empty": DirectoryNames((1, 3, 2), 11, "")}
    discovery.record_names(root, written, [])
    assert discovery.recorded_names(root) == written
    n = s.discovery_names
    with lake.catalog.engine.begin() as c:
        blob = c.execute(sa.select(n.c.names).where(n.c.directory == "/old")).scalar_one()
        assert not blob.startswith(b"\x78") and len(blob) < len(zlib.compress(names.encode(), 1))
        c.execute(n.update().where(n.c.directory == "/old").values(names=zlib.compress(names.encode(), 1)))
    assert discovery.recorded_names(root) == written
    grown = DirectoryNames((1, 2, 2), 12, names + "/new.jsonl")
    discovery.record_names(root, {"/old": grown}, ["/empty"])
    assert discovery.recorded_names(root) == {"/old": grown}


def test_without_a_record_a_round_stats_every_name_of_a_changed_directory(lake: Deployment, tmp_path: Path) -> None:
    first_round(lake)
    day = "host02.web.access/2026/01/02"
    put(lake, f"{day}/b-new.jsonl", b'{"t":"2026-01-03"}\n')
    reput(lake, f"{day}/obj-1.jsonl", tmp_path)
    found = discover(lake)  # a walk with no record of names
    assert (found.registered, found.redelivered, found.remembered) == (1, 1, 0)


def test_the_record_holds_what_the_walk_listed_and_forgets_what_went_or_aged(tmp_path: Path) -> None:
    from siltlake.storage.filesystem import Storage

    staging = Storage(str(tmp_path / "root"))
    for key in ("a/1", "a/2", "a/3", "b/1", "b/2", "c/1"):
        path = Path(staging.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(key.encode())
    accounted, hour = AccountedNames(), 3600 * 10**9

    def walk(since_ns: int = 0, now_ns: int | None = None) -> list[str]:
        listing = staging.list_changed(since_ns, accounted)
        accounted.keep(listing.directories, time.time_ns() if now_ns is None else now_ns, hour)
        return sorted(info.key for info in listing.objects)

    assert walk() == ["a/1", "a/2", "a/3", "b/1", "b/2", "c/1"]
    assert accounted.names == 6
    # Every directory counts as changed (since 0), but only names the record has not seen are stat'ed, and a
    # recorded name is not stat'ed at all: one now a dangling link still counts as remembered.
    Path(staging.path("a/2")).unlink()
    os.symlink("nowhere", staging.path("a/2"))
    listing = staging.list_changed(0, accounted)
    assert (listing.objects, listing.remembered, listing.entries) == ([], 6, 6)
    # A new file, a new link to a directory (followed), and b removed: the record keeps a and c only.
    put_file = Path(staging.path("a/4"))
    put_file.write_bytes(b"4")
    os.symlink(staging.path("c"), staging.path("a/linked"))
    shutil.rmtree(staging.path("b"))
    assert walk() == ["a/4", "a/linked/1"]
    assert (accounted.directories, accounted.names) == (4, 6)  # the root (no files), a (1-4), c, c under the link
    Path(staging.path("a/3")).unlink()
    assert walk() == [] and accounted.names == 5  # a name gone from its directory leaves the record
    # A directory that gained a subdirectory (its link count changed) is read whole, not by the record.
    Path(staging.path("c/sub")).mkdir()
    Path(staging.path("c/sub/x")).write_bytes(b"x")
    listing = staging.list_changed(0, accounted)
    assert {info.key for info in listing.objects} >= {"c/1", "c/sub/x"}
    # Another directory under a recorded path (the old one moved aside, so its inode is not reused) starts from
    # nothing; so does the old one under its new path.
    os.rename(staging.path("a"), staging.path("a-old"))
    Path(staging.path("a")).mkdir()
    Path(staging.path("a/1")).write_bytes(b"new")
    assert {"a/1", "a-old/1", "a-old/4"} <= set(walk())
    shutil.rmtree(staging.path("a-old"))
    # A directory that has not changed for the window is forgotten.
    walk(now_ns=time.time_ns() + 2 * hour)
    assert (accounted.directories, accounted.names) == (0, 0)


def test_a_failed_round_leaves_the_record_as_it_was(lake: Deployment, monkeypatch) -> None:
    first_round(lake)
    day = "host00.web.access/2026/01/01"
    accounted = AccountedNames()
    put(lake, f"{day}/a-new.jsonl", b'{"t":"2026-01-04"}\n')
    assert discover(lake, accounted).registered == 1
    settle()
    put(lake, f"{day}/b-new.jsonl", b'{"t":"2026-01-03"}\n')

    def failing(*args, **kwargs):
        raise RuntimeError("catalog lost")

    monkeypatch.setattr(type(lake.catalog.staging), "sort_listed", failing)
    with pytest.raises(RuntimeError):
        discover(lake, accounted)
    monkeypatch.undo()
    assert accounted.names == 6  # not b-new: the round that listed it registered nothing
    found = discover(lake, accounted)
    assert (found.registered, found.remembered) == (1, 6)
    assert accounted.names == 7

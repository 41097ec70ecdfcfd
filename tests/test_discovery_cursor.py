"""Discovery of a local staging root through its cursor: a round reads what changed since the last listing,
never loses an object put late (under an old date, with an old mtime, moved in) and registers each once.

The rule and its limits: docs/design.md, "Staging objects"."""

from __future__ import annotations

import datetime as dt
import importlib
import os
import time
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.stream.discover import discover
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config

# The module (siltlake.stream exports its function under the same name), whose clock a test moves.
discover_module = importlib.import_module("siltlake.stream.discover")
OLD = dt.datetime(2026, 1, 2, tzinfo=dt.UTC).timestamp()
DAYS = [f"host{host:02d}.web.access/2026/01/{day:02d}" for host in range(3) for day in (1, 2)]


@pytest.fixture
def lake(tmp_path: Path, catalog_url: str) -> Deployment:
    """A deployment with the access table, whose cursor stays exactly at the start of a listing (margin 0: the
    test's writes do not race its rounds), and a staging root of 6 day directories of 5 objects each."""
    deployment = Deployment(make_config(tmp_path, catalog_url, listing_margin=0))
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


def test_an_idle_round_after_the_first_lists_and_looks_up_nothing(lake: Deployment) -> None:
    first_round(lake)
    for _ in range(2):
        idle = discover(lake)
        assert not idle.full_listing
        assert (idle.listed, idle.looked_up, idle.registered, idle.redelivered) == (0, 0, 0, 0)
    changed = lake.staging.list_changed(time.time_ns())
    assert changed.entries == 0 and changed.skipped == len(DAYS)  # the day directories were not even read


def test_a_new_object_is_looked_up_alone(lake: Deployment) -> None:
    first_round(lake)
    put(lake, "host00.web.access/2026/01/02/new.jsonl")
    found = discover(lake)
    assert not found.full_listing
    assert (found.listed, found.looked_up, found.registered) == (6, 1, 1)  # the changed directory's 6 entries
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
    uris = {lake.staging.uri(key) for key in ("host01.web.access/2026/01/01/late.jsonl",
                                              "host02.web.access/2026/01/02/moved.jsonl",
                                              "host00.web.access/2026/01/03/obj.jsonl",
                                              "host02.web.access/2026/01/01/link.jsonl")}
    assert uris <= lake.catalog.staging.known_uris(sorted(uris))


def test_an_object_put_during_a_round_is_found_by_the_next(lake: Deployment, monkeypatch) -> None:
    first_round(lake)
    original = type(lake.staging).list_changed

    def racing(storage, since_ns):  # noqa: ANN001, ANN202
        put(lake, "host00.web.access/2026/01/01/before-walk.jsonl")
        listing = original(storage, since_ns)
        put(lake, "host01.web.access/2026/01/01/after-walk.jsonl")
        return listing

    monkeypatch.setattr(type(lake.staging), "list_changed", racing)
    racing_round = discover(lake).registered
    monkeypatch.undo()
    settle()
    assert racing_round + discover(lake).registered == 2
    assert discover(lake).registered == 0


def test_the_full_listing_runs_at_its_interval_and_sees_in_place_rewrites(lake: Deployment, monkeypatch) -> None:
    first_round(lake)
    # An in-place rewrite changes no directory: the rounds in between cannot see it, the full listing does.
    path = Path(lake.staging.path("host00.web.access/2026/01/01/obj-0.jsonl"))
    with open(path, "r+b") as rewrite:
        rewrite.write(b'{"t":"2026-01-05"}\n')
    later = dt.datetime.now(dt.UTC).timestamp() + 60
    os.utime(path, (later, later))
    assert discover(lake).redelivered == 0
    interval = dt.timedelta(seconds=lake.config.stream.full_listing_interval)
    assert interval == dt.timedelta(hours=1)
    now = discover_module.utcnow()
    monkeypatch.setattr(discover_module, "utcnow", lambda: now + interval - dt.timedelta(seconds=1))
    assert not discover(lake).full_listing
    monkeypatch.setattr(discover_module, "utcnow", lambda: now + interval)
    full = discover(lake)
    assert full.full_listing and full.listed == 30 and full.redelivered == 1 and full.registered == 0
    assert not discover(lake).full_listing  # the next full listing is an interval after this one


def test_the_cursor_never_moves_back(lake: Deployment) -> None:
    cursors = lake.catalog.discovery
    root = lake.staging.root
    assert cursors.get(root) is None
    cursors.advance(root, dt.datetime(2026, 1, 2), dt.datetime(2026, 1, 2))
    cursors.advance(root, dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 1))  # a slower, older listing
    cursors.advance(root, dt.datetime(2026, 1, 3), None)
    cursor = cursors.get(root)
    assert (cursor.cursor_time, cursor.full_listing_time) == (dt.datetime(2026, 1, 3), dt.datetime(2026, 1, 2))

"""A stream round that fails part way (a full disk, the catalog's connections killed) says what it really
committed, and says a full disk is full, not that a server is down."""

from __future__ import annotations

import errno
import sqlite3
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.catalog import StreamCommit
from siltlake.cli.failures import describe
from siltlake.deployment import Deployment
from siltlake.storage.filesystem import Storage
from siltlake.stream import commit, stream_once

from .test_poison_objects import events, jsonl, stage

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("objects_alone")]  # the per-object commit
sqlite_only = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)


def staged(deployment: Deployment, count: int) -> None:
    for n in range(count):
        stage(deployment, f"f.web.access/2026/11/20/{n}.jsonl", jsonl(events(2, 10 * n)))


def fail_second_commit(monkeypatch: pytest.MonkeyPatch, deployment: Deployment, error: Exception) -> None:
    """The second commit chunk's transaction fails as it commits (after its work): it rolls back."""
    real = deployment.catalog.partitions.stream_commit
    chunks = []

    @contextmanager
    def failing():
        with real() as tx:
            yield tx
            chunks.append(tx)
            if len(chunks) == 2:
                raise error

    monkeypatch.setattr(deployment.catalog.partitions, "stream_commit", failing)


def fail_fourth_move(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lake's disk fills up on the fourth move into place (the second object of the second chunk)."""
    real = Storage.place
    moves = []

    def place(self: Storage, temporary: str, target: str) -> None:
        moves.append(target)
        if len(moves) == 4:
            raise OSError(errno.ENOSPC, "No space left on device", self.path(target))
        real(self, temporary, target)

    monkeypatch.setattr(Storage, "place", place)


def kill_connection_at_fourth_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog's connection is killed (as pg_terminate_backend does) at the second object of the second
    chunk, after its parts were moved into place."""
    real = StreamCommit.add_small_object
    calls = []

    def add_small_object(self: StreamCommit, **values: object) -> None:
        calls.append(values)
        if len(calls) == 4:
            raise sa.exc.OperationalError(
                "INSERT", {}, Exception("terminating connection due to administrator command")
            )
        real(self, **values)

    monkeypatch.setattr(StreamCommit, "add_small_object", add_small_object)


def sqlite_full() -> Exception:
    return sa.exc.OperationalError("COMMIT", {}, sqlite3.OperationalError("database or disk is full"))


@sqlite_only
@pytest.mark.parametrize("failure", ["catalog disk full", "lake disk full", "catalog connection killed"])
def test_a_failed_round_counts_only_what_committed(
    deployment: Deployment, access_table, failure: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    staged(deployment, 5)
    monkeypatch.setattr(commit, "COMMIT_CHUNK", 2)
    if failure == "lake disk full":
        fail_fourth_move(monkeypatch)
    elif failure == "catalog connection killed":
        kill_connection_at_fourth_object(monkeypatch)
    else:
        fail_second_commit(monkeypatch, deployment, sqlite_full())

    with pytest.raises(Exception) as caught:
        stream_once(deployment)

    assert len(deployment.catalog.staging.pending(10)) == 3, "the first chunk of two committed, nothing else"
    message = describe(caught.value, "sqlite:///catalog.db").message
    assert "had committed 2 staging objects (4 records)" in message, message
    small = deployment.catalog.partitions.small_objects(access_table.id)
    assert len(small) == 2
    on_disk = [info.key for info in deployment.lake.list() if info.key.endswith(".parquet")]
    if failure != "catalog disk full":  # a failing COMMIT leaves the moved objects to reap, as orphans
        assert len(on_disk) == 2, f"the rolled-back chunk's objects are moved back: {on_disk}"
    if failure != "catalog connection killed":
        assert "disk is full" in message and "server is up" not in message, message
    if failure == "lake disk full":
        assert str(Path(deployment.lake.path(""))) in message, message
    if failure == "catalog disk full":
        assert "catalog" in message and "sqlite:///catalog.db" in message, message


def test_a_full_disk_is_said_so_wherever_it_is_found() -> None:
    postgres_full = sa.exc.OperationalError(
        "INSERT",
        {},
        Exception('could not extend file "base/16384/2619": No space left on device\nHINT:  Check free disk space.'),
    )
    for error in (sqlite_full(), postgres_full):
        message = describe(error, "postgresql://db/silt").message
        assert message.startswith("the catalog's disk is full (postgresql://db/silt)"), message
        assert "server is up" not in message
    arrow = OSError("Failed to write '/lake/k1/x.parquet'. Detail: [errno 28] No space left on device")
    message = describe(arrow).message
    assert "/lake/k1/x.parquet" in message and "the disk is full" in message, message

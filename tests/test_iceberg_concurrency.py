"""Two publish runs, or two reaps, on one deployment at once: their Iceberg commits race.

Each runner has its own Deployment (its own catalog connections, as two processes would) and runs in its own
thread; a barrier holds both at their first Iceberg commit, so both have read the table and planned the same
commit before either lands. The loser must re-read the table, not replay its planned files on top of the winner's.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg import reap as iceberg_reap
from siltlake.publish.iceberg import target as iceberg_target
from siltlake.publish.iceberg.catalog import VERSION_PROPERTY, open_catalog
from siltlake.publish.iceberg.manifests import expire_snapshots
from siltlake.publish.iceberg.snapshots import snapshot_files, snapshot_of_version
from siltlake.publish.iceberg.target import IcebergTarget
from siltlake.reap import reap_once

from .merge_helpers import add_small_objects, rows_for
from .test_iceberg_target import assert_same_as_siltlake, merged_after_two_versions, published, with_iceberg
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark  # the deployment fixture starts the test session's Spark
RUNNERS = 2


def race(
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType | type,
    name: str,
    run: Callable[[Deployment], Any],
    deployment: Deployment,
) -> list[Any]:
    """Run `run` in RUNNERS threads, each on its own Deployment, all held at their first call of `module.<name>`
    (the real one, called once all have reached it); returns their results (or exceptions)."""
    barrier = threading.Barrier(RUNNERS, timeout=60)
    first = threading.local()
    original = getattr(module, name)

    def held(*args: Any, **kwargs: Any) -> Any:  # passes through
        if not getattr(first, "done", False):
            first.done = True
            barrier.wait()
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, held)
    results: list[Any] = [None] * RUNNERS

    def runner(index: int) -> None:
        own = Deployment(deployment.config)
        try:
            results[index] = run(own)
        except Exception as exc:  # returned for the test to show
            results[index] = exc
        finally:
            own.close()

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(RUNNERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not barrier.broken, "a runner never reached its Iceberg commit"
    return results


def test_two_publish_runs_at_once_commit_each_version_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_iceberg(deployment)
    record = make_table(deployment)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 1000, 0)])
    published(deployment, tokyo(DAY, 12))
    # Versions 2 and 3 are made while the target is off: both runs below find the same two to commit.
    deployment.config.publish.targets = []
    for seed, hour in ((1, 13), (2, 14)):
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 1000, seed)])
        publish_once(deployment, now=tokyo(DAY, hour))
    deployment.config.publish.targets = ["iceberg"]

    reports = race(
        monkeypatch, iceberg_target, "commit_files", lambda own: publish_once(own, now=tokyo(DAY, 15)), deployment
    )
    assert not any(isinstance(r, Exception) for r in reports), reports
    assert not any(r.target_errors for r in reports), [r.target_errors for r in reports]

    snapshot_table = open_catalog(deployment).load_table(("web", "access"))
    versions = [s.summary[VERSION_PROPERTY] for s in snapshot_table.snapshots()]
    assert versions == ["1", "2", "3"], f"each table version committed once: {versions}"
    assert len(snapshot_table.scan().to_arrow()) == len(Lake(deployment).table("web.access").to_arrow()) == 3000
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))
    # A later run has nothing left to add.
    assert published(deployment, tokyo(DAY, 16)) == []
    assert len(open_catalog(deployment).load_table(("web", "access")).scan().to_arrow()) == 3000


def test_two_first_publish_runs_at_once_make_the_iceberg_table_once(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both find no Iceberg table and create it: the loser of the create takes the winner's table."""
    with_iceberg(deployment)
    record = make_table(deployment)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 1000, 0)])
    deployment.config.publish.targets = []
    publish_once(deployment, now=tokyo(DAY, 12))
    deployment.config.publish.targets = ["iceberg"]

    reports = race(monkeypatch, IcebergTarget, "_create", lambda own: publish_once(own, now=tokyo(DAY, 13)), deployment)
    assert not any(isinstance(r, Exception) for r in reports), reports
    assert not any(r.target_errors for r in reports), [r.target_errors for r in reports]
    assert sum("iceberg: CREATE TABLE web.access" in " ".join(r.external) for r in reports) == 1
    snapshot_table = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary[VERSION_PROPERTY] for s in snapshot_table.snapshots()] == ["1"]
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))


def test_two_reaps_at_once_expire_each_snapshot_once_and_both_finish(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged_after_two_versions(deployment)
    now = utcnow() + dt.timedelta(days=8)
    reports = race(monkeypatch, iceberg_reap, "expire_snapshots", lambda own: reap_once(own, now=now), deployment)
    assert not any(isinstance(r, Exception) for r in reports), reports

    snapshot_table = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary[VERSION_PROPERTY] for s in snapshot_table.snapshots()] == ["3"]
    for f in snapshot_files(snapshot_table, snapshot_table.current_snapshot()):
        assert deployment.lake.exists(deployment.lake.key_of(f.file_path.removeprefix("file://")))
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))
    reap_once(deployment, now=now)  # and a third, alone, still has nothing to trip on
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))


def test_an_expiry_another_commit_already_made_is_a_lost_race_not_a_bug(deployment: Deployment) -> None:
    """The catalog applies an expiry to the table as it is at commit time: a snapshot another reap expired after
    this one read the table is a commit conflict (decided again from the new table), not PyIceberg's "Snapshot ...
    does not exist" ValueError (which reap reported as a bug)."""
    from pyiceberg.exceptions import CommitFailedException

    merged_after_two_versions(deployment)
    first, second = (open_catalog(deployment).load_table(("web", "access")) for _ in range(2))
    older = [snapshot_of_version(first, 1).snapshot_id]
    expire_snapshots(first, older)
    with pytest.raises(CommitFailedException, match="expired by another commit"):
        expire_snapshots(second, older)
    assert [s.summary[VERSION_PROPERTY] for s in second.snapshots()] == ["2", "3"], "the loser sees the new table"


def test_a_reap_whose_view_another_reap_expired_and_deleted_decides_again(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reap B reads the table, then reap A expires snapshots 1 and 2 and deletes their manifest lists (past the
    grace period), then B reads those snapshots' manifests: missing files of a table that moved on are a lost race,
    decided again from the new table, not an error."""
    merged_after_two_versions(deployment)
    now = utcnow() + dt.timedelta(days=8)
    read, other_done = threading.Event(), threading.Event()
    original = IcebergTarget.load
    held = threading.local()

    def load_then_wait(self: IcebergTarget, ident: tuple[str, str]) -> Any:  # a table
        table = original(self, ident)
        if getattr(held, "on", False):
            held.on = False
            read.set()
            assert other_done.wait(60)
        return table

    monkeypatch.setattr(IcebergTarget, "load", load_then_wait)
    results: list[Any] = []

    def reap_b() -> None:
        held.on = True
        own = Deployment(deployment.config)
        try:
            results.append(reap_once(own, now=now))
        except Exception as exc:  # shown by the assertion below
            results.append(exc)
        finally:
            own.close()

    thread = threading.Thread(target=reap_b)
    thread.start()
    assert read.wait(60)
    reap_once(deployment, now=now)  # reap A, whole
    other_done.set()
    thread.join(120)
    assert len(results) == 1 and not isinstance(results[0], Exception), results
    snapshot_table = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary[VERSION_PROPERTY] for s in snapshot_table.snapshots()] == ["3"]
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))

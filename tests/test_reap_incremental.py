"""Incremental reap (docs/design.md, "Incremental runs"): a run lists only the prefixes that changed since the last
completed run, still deletes what it must there, and a forced or periodic full sweep catches what lies outside."""

from __future__ import annotations

import datetime as dt

import pytest

from siltlake.catalog import ReapScope
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.merge import merge_once
from siltlake.reap import reap_once
from siltlake.reap.incremental import ttl_cutoff

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table, only_partition
from .test_publish import tokyo
from .test_reap import age, counts, files, switched_day

DAYS = [DAY - dt.timedelta(days=n) for n in range(6)]


@pytest.fixture
def listings(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every prefix of the instance key the lake is listed under, with how many objects it gave (the derived
    builds' area, listed by the derived reaper at every run, lies outside the key)."""
    seen: list[tuple[str, int]] = []
    original = deployment.lake.list

    def counting(prefix: str = ""):  # like Storage.list
        found = list(original(prefix))
        if prefix.startswith(deployment.instance_key + "/"):
            seen.append((prefix, len(found)))
        return iter(found)

    monkeypatch.setattr(deployment.lake, "list", counting)
    return seen


def write_copy(deployment: Deployment, source: str, key: str) -> str:
    deployment.lake.write_bytes(key, deployment.lake.read_bytes(source))
    return key


def test_an_incremental_run_lists_only_changed_partitions_and_a_full_sweep_catches_the_rest(
    deployment: Deployment, listings: list[tuple[str, int]]
) -> None:
    table = make_table(deployment)
    layout = table.layout(deployment.instance_key)
    key = deployment.instance_key
    start = utcnow()
    for seed, date in enumerate(DAYS):
        add_small_objects(deployment, table, date, [rows_for(date, 10, seed * 10 + n) for n in range(2)])
    merge_once(deployment)
    # Two hours later (reap.change_slack, one hour, behind): the partitions above are old news.
    first = reap_once(deployment, now=start + dt.timedelta(hours=2))
    assert first.full_sweep and [prefix for prefix, _ in listings] == [f"{key}/"]

    changed, untouched = DAYS[0], DAYS[-1]
    some_object = next(k for k in files(deployment) if "/merged/" in k)
    # A stream writer killed between moving its object into place and committing its row, in a partition
    # that has not changed since: nothing in the catalog says so.
    hidden_orphan = write_copy(deployment, some_object, layout.small_object(untouched, 9_999_999, False))
    dead_temporary = write_copy(deployment, some_object, layout.task_temporary("deadrun", 1, "x.parquet"))
    age(deployment, {hidden_orphan, dead_temporary})
    later = start + dt.timedelta(hours=3)
    more = add_small_objects(deployment, table, changed, [rows_for(changed, 10, 99)], now=later)
    merge_once(deployment, clock=lambda: later)
    # A merged object below the partition's largest upper bound: no merge can commit it any more.
    superseded = write_copy(deployment, some_object, layout.merged_object(changed, 0, more[0] - 1))
    total = len(files(deployment))
    listings.clear()

    second = reap_once(deployment, now=start + dt.timedelta(hours=4))
    assert not second.full_sweep
    prefixes = [prefix for prefix, _ in listings]
    allowed = {f"{key}/_tmp/", *layout.partition_directories(changed)}
    assert set(prefixes) <= allowed and f"{key}/_tmp/" in prefixes
    assert second.prefixes_listed == len(prefixes) == len(allowed)
    assert second.listed == sum(n for _, n in listings) < total / 3
    # The merge extended the changed partition's range: its old object is superseded too.
    assert counts(second)["superseded"][0] == 2 and counts(second)["orphan"][0] == 1
    assert superseded not in files(deployment) and dead_temporary not in files(deployment)
    assert hidden_orphan in files(deployment), "outside the changed partitions: left to the full sweep"

    # Nothing changed since: the next run looks at the changed partition again (its change is within
    # reap.change_slack of the last run), the one after that lists the temporaries only.
    listings.clear()
    again = reap_once(deployment, now=start + dt.timedelta(hours=6))
    assert set(prefix for prefix, _ in listings) == allowed and again.objects == 0
    listings.clear()
    quiet = reap_once(deployment, now=start + dt.timedelta(hours=7))
    assert not quiet.full_sweep and [prefix for prefix, _ in listings] == [f"{key}/_tmp/"]

    # The periodic full sweep (no full sweep within reap.full_sweep_interval) finds the hidden orphan.
    listings.clear()
    interval = deployment.config.reap.full_sweep_interval
    periodic = reap_once(deployment, now=start + dt.timedelta(hours=4, seconds=interval))
    assert periodic.full_sweep and [prefix for prefix, _ in listings] == [f"{key}/"]
    assert hidden_orphan not in files(deployment) and counts(periodic)["orphan"][0] == 1


def test_a_forced_full_sweep_is_what_the_next_runs_start_from_and_a_failed_run_is_not(
    deployment: Deployment, listings: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(deployment)
    layout = table.layout(deployment.instance_key)
    start = utcnow()
    for seed, date in enumerate(DAYS[:3]):
        add_small_objects(deployment, table, date, [rows_for(date, 10, seed)])

    def at(hours: int) -> dt.datetime:
        return start + dt.timedelta(hours=hours)

    assert reap_once(deployment, now=at(2)).full_sweep
    assert not reap_once(deployment, now=at(3)).full_sweep
    hidden = layout.small_object(DAYS[2], 9_999_999, False)
    deployment.lake.write_bytes(hidden, b"x")
    age(deployment, {hidden})
    assert not reap_once(deployment, now=at(4), dry_run=True).full_sweep
    assert hidden in files(deployment)
    # A run whose delete fails is not one the next runs start from: they look as far back as before it.
    monkeypatch.setattr(
        deployment.lake, "delete", lambda key, missing_ok=False: (_ for _ in ()).throw(PermissionError(key))
    )
    failed = reap_once(deployment, now=at(4), full=True)
    assert failed.failed and hidden in files(deployment)
    monkeypatch.undo()
    assert deployment.catalog.reaping.last_runs(at(4))[0].run_time == at(3)
    forced = reap_once(deployment, now=at(5), full=True)
    assert forced.full_sweep and hidden not in files(deployment)
    listings.clear()
    assert not reap_once(deployment, now=at(6)).full_sweep
    assert all("/dt=" not in prefix for prefix, _ in listings), "nothing changed since the forced sweep"


def test_the_scope_holds_partitions_whose_versions_crossed_the_retention_cutoff(deployment: Deployment) -> None:
    table, _ = switched_day(deployment)
    partition = only_partition(deployment, table).id
    after_everything = utcnow() + dt.timedelta(days=1)
    newest = max(o.id for o in deployment.catalog.partitions.small_objects(table.id))

    def scope(crossing: tuple[dt.datetime, dt.datetime]) -> set[int] | None:
        return deployment.catalog.reaping.view(
            ReapScope(
                since=after_everything, crossing=crossing, small_above=newest, ttl_cutoff=ttl_cutoff(after_everything)
            )
        ).scope

    second_version = tokyo(DAY, 13)
    assert scope((second_version - dt.timedelta(minutes=1), second_version + dt.timedelta(minutes=1))) == {partition}
    assert scope((second_version + dt.timedelta(minutes=1), second_version + dt.timedelta(minutes=2))) == set()
    view = deployment.catalog.reaping.view(
        ReapScope(
            since=after_everything,
            crossing=(second_version, second_version),
            small_above=newest,
            ttl_cutoff=ttl_cutoff(after_everything),
        )
    )
    assert view.partitions == [] and view.versions == [] and view.small_objects == []

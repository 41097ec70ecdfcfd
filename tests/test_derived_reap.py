"""The derived reaper: the active list refreshed first, then only this deployment's builds that
nothing needs are deleted; killed builds, persist_for, trigger_sql, and two deployments sharing a lake."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.catalog import BuildPartition, DerivedRecord
from siltlake.clock import utcnow
from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.derived import build_derived, create_derived, regenerate
from siltlake.derivedef import DerivedDef
from siltlake.reap import reap_once
from siltlake.storage.keys import build_object, build_of
from siltlake.storage.manifests import write_manifests
from siltlake.tabledef import TableDef
from siltlake.write.update import delete_rows

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for
from .test_derived import FIRST, ROLLUP, make_source, rows_of, sqlite_only

DAY = dt.timedelta(days=1)


def build_names(deployment: Deployment) -> set[str]:
    return {name for info in deployment.lake.list("_derived/") if (name := build_of(info.key))}


def dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


@pytest.mark.spark
def test_a_killed_build_leaves_readers_on_the_last_build_and_reap_removes_it(deployment: Deployment, spark) -> None:
    make_source(deployment, days=2)
    create_derived(deployment, DerivedDef.from_mapping({"name": "web.daily_actions", "query": ROLLUP}))
    first = build_derived(deployment, "web.daily_actions")
    before = rows_of(spark, deployment, "SELECT * FROM web.daily_actions")
    record = deployment.catalog.derived.get("web.daily_actions")
    # A builder killed while writing: its build row says building, its process is gone, some objects exist.
    killed = deployment.catalog.derived.start_build(
        record,
        reg_key=deployment.instance_key,
        catalog_id="c",
        kind="full",
        host=_host(),
        pid=dead_pid(),
        now=utcnow(),
        dead=lambda _: False,
    )
    write_part(deployment, record, killed.name, FIRST)
    assert rows_of(spark, deployment, "SELECT * FROM web.daily_actions") == before

    dry = reap_once(deployment, dry_run=True, grace=0, force=True)
    assert dry.derived.lost == [killed.name] and build_names(deployment) == {first.build, killed.name}
    report = reap_once(deployment, grace=0, force=True)
    assert report.derived.lost == [killed.name]
    assert report.derived.deleted == [(killed.name, "its builder was lost")]
    assert build_names(deployment) == {first.build}, "the current build stays"
    assert rows_of(spark, deployment, "SELECT * FROM web.daily_actions") == before
    assert build_derived(deployment, "web.daily_actions").table_version is not None


def _host() -> str:
    from siltlake.hosts import local_host

    return local_host().name


def write_part(deployment: Deployment, record: DerivedRecord, build: str, date: dt.date) -> tuple[str, int]:
    key = build_object(build, date, 0)
    with deployment.lake.open_output(key) as sink:
        pq.write_table(
            pa.table({c.name: pa.nulls(1, c.arrow_field().type) for c in record.table.definition.columns}), sink
        )
    return key, deployment.lake.info(key).size


@pytest.mark.spark
@sqlite_only
def test_persist_for_and_trigger_sql_rebuild_and_the_reaper_follows_persist_for(deployment: Deployment, spark) -> None:
    source = make_source(deployment, days=1)
    create_derived(deployment, DerivedDef.from_mapping({"name": "web.kept", "query": ROLLUP, "persist_for": "1h"}))
    create_derived(
        deployment,
        DerivedDef.from_mapping(
            {"name": "web.triggered", "query": ROLLUP, "trigger_sql": "SELECT max(dt) FROM web.access"}
        ),
    )
    now = utcnow()
    first = regenerate(deployment, now)
    assert not first.failed, first.failed
    assert sorted(r.table for r in first.built) == ["web.kept", "web.triggered"]
    assert regenerate(deployment, now + dt.timedelta(minutes=30)).built == []

    later = now + dt.timedelta(hours=2)
    expired = reap_once(deployment, later, dry_run=True)
    kept_build = next(r.build for r in first.built if r.table == "web.kept")
    assert (kept_build, "persist_for expired at " + f"{now + dt.timedelta(hours=1):%Y-%m-%d %H:%M:%S} UTC") in [
        (b, why[: len("persist_for expired at ") + 23]) for b, why in expired.derived.deactivated
    ]
    assert kept_build not in [b for b, _ in expired.derived.deleted], "the current version still references it"
    rebuilt = regenerate(deployment, later)
    assert [r.table for r in rebuilt.built] == ["web.kept"], "persist_for expired; max(dt) did not change"

    new_day = FIRST + DAY
    add_small_objects(deployment, source, new_day, [rows_for(new_day, 10, 5)])
    from siltlake.publish import publish_once

    publish_once(deployment)
    triggered = regenerate(deployment, later)
    assert [r.table for r in triggered.built] == ["web.triggered"]
    assert triggered.built[0].dates == [FIRST, new_day]


@pytest.mark.spark
@sqlite_only
def test_sources_first_and_a_failed_source_holds_back_its_readers(deployment: Deployment, spark) -> None:
    source = make_source(deployment, days=1)
    create_derived(
        deployment,
        DerivedDef.from_mapping(
            {"name": "web.level1", "query": "SELECT dt, action, count(*) AS n FROM web.access GROUP BY dt, action"}
        ),
    )
    create_derived(
        deployment,
        DerivedDef.from_mapping({"name": "web.level2", "query": "SELECT dt, sum(n) AS n FROM web.level1 GROUP BY dt"}),
    )
    report = regenerate(deployment)
    assert [r.table for r in report.built] == ["web.level1", "web.level2"]
    assert rows_of(spark, deployment, "SELECT n FROM web.level2") == {(80,): 1}
    assert regenerate(deployment).built == [], "both fresh"

    delete_rows(deployment, "web.access", FIRST, "action = 'a1'")
    level1 = deployment.catalog.derived.get("web.level1")
    running = deployment.catalog.derived.start_build(
        level1,
        reg_key=deployment.instance_key,
        catalog_id="c",
        kind="full",
        host="another host",
        pid=1,
        now=utcnow(),
        dead=lambda _: False,
    )
    held = regenerate(deployment)
    assert [table for table, _ in held.failed] == ["web.level1"] and "is being built" in held.failed[0][1]
    assert held.waiting == [("web.level2", "a derived table it reads failed to build")]
    deployment.catalog.derived.fail_build(running.id, "stopped", utcnow())
    assert [r.table for r in regenerate(deployment).built] == ["web.level1", "web.level2"]
    remaining = rows_of(spark, deployment, "SELECT count(*) FROM web.access")
    assert rows_of(spark, deployment, "SELECT n FROM web.level2") == {(next(iter(remaining))[0],): 1}
    assert source.id in deployment.catalog.derived.get("web.level1").source_ids


# --- two deployments sharing one lake (enemy reaping) --------------------------------------------------

KEYS = ("aaaa0001", "bbbb0002")


def shared_deployments(tmp_path: Path) -> list[Deployment]:
    deployments = []
    for key in KEYS:
        config = Config.model_validate(
            {
                "instance_key": key,
                "catalog": {"url": f"sqlite:///{tmp_path / f'{key}.db'}"},
                "storage": {"root": str(tmp_path / "lake"), "staging_root": str(tmp_path / f"staging-{key}")},
            }
        )
        deployments.append(with_rollup(Deployment(config)))
    return deployments


def with_rollup(deployment: Deployment) -> Deployment:
    """The deployment initialised, holding web.access and the derived web.rollup over it."""
    deployment.init()
    source = deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    table = TableDef.from_mapping(
        {"schema": "web", "name": "rollup", "kind": "derived", "columns": [{"name": "hits", "type": "bigint"}]}
    )
    deployment.catalog.derived.create(
        DerivedDef.from_mapping({"name": "web.rollup", "query": ROLLUP}), table, [source.id], utcnow()
    )
    return deployment


def written_build(deployment: Deployment, dates: list[dt.date], now: dt.datetime, *, pid: int):
    """A started build of web.rollup by `pid` on this host with an object and manifests per date written, not
    published: (derived record, build, its partitions)."""
    record = deployment.catalog.derived.get("web.rollup")
    build = deployment.catalog.derived.start_build(
        record,
        reg_key=deployment.instance_key,
        catalog_id="c",
        kind="full",
        host=_host(),
        pid=pid,
        now=now,
        dead=lambda _: True,
    )
    parts = []
    for date in dates:
        key, size = write_part(deployment, record, build.name, date)
        manifest, _ = write_manifests(
            deployment.lake,
            record.table.layout(deployment.instance_key),
            date,
            0,
            [(key, size)],
            label=f"build-{build.id:010d}",
        )
        parts.append(BuildPartition(date, manifest, 1, size))
    return record, build, parts


def publish_build(deployment: Deployment, dates: list[dt.date], now: dt.datetime, *, crash: bool) -> str:
    """A build made of real objects, manifests and catalog commits, without Spark (what the reaper sees is
    the same); crash: the builder dies after writing, before publishing."""
    record, build, parts = written_build(deployment, dates, now, pid=dead_pid() if crash else 1)
    if not crash:
        deployment.catalog.derived.publish_build(
            record, build, parts, source_state={}, trigger_value=None, expire_time=None, now=now
        )
    return build.name


def needed_builds(deployment: Deployment) -> set[str]:
    """Builds of this deployment that readers need: active ones and those a retained version references."""
    view = deployment.catalog.derived.reap_view()
    needed = set(view.active) | view.referenced
    return {b.name for b in view.builds.values() if b.dates_written and b.id in needed}


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["build", "crash", "reap", "wait"]), st.integers(0, 1), st.sets(st.integers(0, 3), min_size=1)
    ),
    min_size=3,
    max_size=12,
)


@pytest.mark.slow  # 25 generated histories of two deployments: about 20 s
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(OPERATIONS)
def test_two_deployments_sharing_a_lake_never_reap_each_others_builds(tmp_path_factory, operations) -> None:
    tmp_path = tmp_path_factory.mktemp("shared")
    deployments = shared_deployments(tmp_path)
    now = utcnow()
    try:
        for kind, who, days in operations:
            deployment = deployments[who]
            dates = sorted(FIRST + day * DAY for day in days)
            if kind == "build":
                publish_build(deployment, dates, now, crash=False)
            elif kind == "crash":
                publish_build(deployment, dates, now, crash=True)
            elif kind == "wait":
                now += dt.timedelta(days=3)
            else:
                report = reap_once(deployment, now, retention=86400, grace=0, force=True)
                assert all(name.startswith(deployment.instance_key + "-") for name, _ in report.derived.deleted)
                other = KEYS[1 - who]
                assert all(
                    why.startswith(f"another deployment's build (reg_key {other})")
                    for name, why in report.derived.kept
                    if name.startswith(other)
                ), report.derived.kept
            present = build_names(deployments[0])
            for each in deployments:
                assert needed_builds(each) <= present, (kind, who, needed_builds(each) - present)
    finally:
        for deployment in deployments:
            deployment.close()


# --- a build that publishes while the reaper runs ---------------------------------------------------------


@pytest.fixture
def sparkless(tmp_path: Path, catalog_url: str) -> Deployment:
    """A deployment without Spark holding web.access and the derived web.rollup (builds made by hand)."""
    from .conftest import make_config

    deployment = with_rollup(Deployment(make_config(tmp_path, catalog_url)))
    yield deployment
    deployment.close()


def silent_build(deployment: Deployment, dates: list[dt.date]):  # (BuildRecord, publish it)
    """A build whose builder looks lost (a dead pid on this host) with its objects written, and a function
    that publishes it."""
    record, build, parts = written_build(deployment, dates, utcnow(), pid=dead_pid())
    return build, lambda: deployment.catalog.derived.publish_build(
        record, build, parts, source_state={}, trigger_value=None, expire_time=None, now=utcnow()
    )


def test_a_build_that_publishes_between_the_reapers_snapshot_and_mark_lost_is_kept(
    sparkless: Deployment, monkeypatch
) -> None:
    from siltlake.derived.reap import reap_derived
    from siltlake.lake import Lake

    deployment = sparkless
    build, publish = silent_build(deployment, [FIRST, FIRST + DAY])
    mark_lost = deployment.catalog.derived.mark_lost

    def publish_first(build_ids, now):  # the builder wins the race
        publish()
        return mark_lost(build_ids, now)

    monkeypatch.setattr(deployment.catalog.derived, "mark_lost", publish_first)
    report = reap_derived(deployment, utcnow(), grace=0)
    assert build.name not in [name for name, _ in report.deleted]
    assert build_names(deployment) == {build.name}
    assert [b.status for b in deployment.catalog.derived.builds(build.derived_id)] == ["published"]
    assert Lake(deployment).table("web.rollup").to_arrow().num_rows == 2


@pytest.mark.postgres
@pytest.mark.parametrize("catalog_url", ["postgresql"], indirect=True)
def test_publishing_a_build_waits_for_the_reaper_marking_it_lost(sparkless: Deployment, catalog_url: str) -> None:
    """On PostgreSQL publish_build locks the build's row: a reaper's mark_lost in flight wins, and the build is
    refused instead of published over its failed status (whose files the reaper then deletes)."""
    import concurrent.futures
    import time

    import sqlalchemy as sa

    from siltlake.errors import CatalogError

    from .test_derived_cli import waiting_on_a_lock

    deployment = sparkless
    build, publish = silent_build(deployment, [FIRST])
    engine = sa.create_engine(catalog_url)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            with engine.connect() as reaper, reaper.begin():
                reaper.exec_driver_sql(
                    "UPDATE derived_builds SET status = 'failed' WHERE id = %s AND status = 'building'", (build.id,)
                )
                publishing = pool.submit(publish)
                deadline = dt.datetime.now() + dt.timedelta(seconds=30)
                while not waiting_on_a_lock(reaper) and not publishing.done() and dt.datetime.now() < deadline:
                    time.sleep(0.05)
            with pytest.raises(CatalogError, match="is failed, not running"):
                publishing.result(60)
    finally:
        engine.dispose()
    assert [b.status for b in deployment.catalog.derived.builds(build.derived_id)] == ["failed"]

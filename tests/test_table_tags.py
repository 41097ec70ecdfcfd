"""Tags: table.tag("name", version=) names a table version, read as as_of_version="name" (Table, Scan, inspect) and
VERSION AS OF 'name' in SQL; reap keeps what a tagged version shows, however old, and the versions between a tagged
one and the retained ones are no longer readable."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest

from siltlake.deployment import Deployment
from siltlake.errors import CatalogError, DefinitionError, NotFoundError, SiltError, VersionOutOfRange
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.read.duck import faithful, run_plan
from siltlake.read.plan import plan_query

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo

NEXT_DAY = DAY + dt.timedelta(days=1)
LATER = tokyo(NEXT_DAY, 6) + dt.timedelta(days=8)  # past the default retention (7 days) of every version below


def users(table) -> Counter:
    return Counter(table.column("user_id").to_pylist())


def three_versions(deployment: Deployment, name: str = "access") -> Lake:
    """Versions 1, 2 and 3 of DAY's partition, each showing one more small object than the one before."""
    record = deployment.catalog.tables.get(f"web.{name}") if name == "access" else make_table(deployment, name)
    for seed, hour in ((0, 12), (1, 13), (2, 14)):
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, seed)])
        publish_once(deployment, now=tokyo(DAY, hour))
    return Lake(deployment)


def duck(deployment: Deployment, query: str) -> list[tuple]:
    plan = plan_query(query, deployment)
    return run_plan(plan, deployment, faithful(plan, deployment), 1000)


def test_a_tag_is_read_wherever_a_version_number_is(plain_deployment: Deployment) -> None:
    with pytest.raises(VersionOutOfRange, match="has no published versions yet, so none to tag"):
        Lake(plain_deployment).table("web.access").tag("early")
    table = three_versions(plain_deployment).table("web.access")
    first = users(table.to_arrow(as_of_version=1))
    tag = table.tag("audit-2026.11", version=1, now=tokyo(DAY, 15))
    assert (tag.name, tag.table_version) == ("audit-2026.11", 1)
    assert table.tag("newest").table_version == 3 and table.tags == {"audit-2026.11": 1, "newest": 3}
    assert users(table.to_arrow(as_of_version="audit-2026.11")) == first
    scan = table.scan(as_of_version="audit-2026.11", columns=["user_id"])
    assert scan.count() == 10 and scan.as_of_version == 1
    assert table.scan().with_version("newest").count() == 30
    assert table.inspect.partitions(as_of_version="audit-2026.11").column("version").to_pylist() == [1]
    assert duck(plain_deployment, "SELECT count(*) FROM web.access VERSION AS OF 'audit-2026.11'") == [(10,)]
    assert duck(plain_deployment, "SELECT count(*) FROM web.access VERSION AS OF 'newest'") == [(30,)]

    # Tagging again: the same version is no change; another version needs move=True.
    assert table.tag("audit-2026.11", version=1).table_version == 1
    with pytest.raises(CatalogError, match="tag audit-2026.11 of web.access names version 1; give move=True"):
        table.tag("audit-2026.11", version=2)
    assert table.tag("audit-2026.11", version=2, move=True).table_version == 2
    assert table.scan(as_of_version="audit-2026.11").count() == 20
    for name, refused in [("3", "is not a tag name"), ("a b", "is not a tag name"), ("x" * 101, "at most 100")]:
        with pytest.raises(DefinitionError, match=refused):
            table.tag(name, version=1)
    with pytest.raises(VersionOutOfRange, match="has no version 4 to tag: its readable versions are 1 to 3"):
        table.tag("future", version=4)
    with pytest.raises(
        NotFoundError,
        match=r"web.access has no tag 'audit-2026-11' \(did you mean "
        r"audit-2026.11\?\); its tags are audit-2026.11, newest",
    ):
        table.to_arrow(as_of_version="audit-2026-11")
    with pytest.raises(SiltError, match="no tag 'nope'.*VERSION AS OF takes a table version number or a quoted tag"):
        plan_query("SELECT * FROM web.access VERSION AS OF 'nope'", plain_deployment)
    assert table.untag("newest").table_version == 3 and table.tags == {"audit-2026.11": 2}
    with pytest.raises(NotFoundError, match="has no tag 'newest'"):
        table.untag("newest")


@pytest.mark.spark  # restoring the tagged version rewrites a partition on Spark
def test_reap_keeps_a_tagged_version_and_refuses_the_versions_it_no_longer_has(plain_deployment: Deployment) -> None:
    lake = three_versions(plain_deployment)
    table = lake.table("web.access")
    untagged = three_versions(plain_deployment, "other").table("web.other")
    first = users(table.to_arrow(as_of_version=1))
    table.tag("first", version=1)

    lake.reap(now=LATER)
    assert untagged.versions() == (3, 3), "untagged: versions 1 and 2 expired"
    assert table.versions() == (3, 3), "version 2 is gone: 3 is the oldest of the unbroken run"
    assert users(table.to_arrow(as_of_version="first")) == users(table.to_arrow(as_of_version=1)) == first
    with pytest.raises(VersionOutOfRange, match="its readable versions are 3 to 3"):
        table.to_arrow(as_of_version=2)
    with pytest.raises(VersionOutOfRange):
        untagged.to_arrow(as_of_version=1)
    assert table.inspect.partitions(as_of_version="first").column("rows").to_pylist() == [10]
    assert [(v["table_version"], v["readable"], v["rows"]) for v in table.inspect.versions().to_pylist()] == [
        (1, True, 10),
        (3, True, 30),
    ], "version 2's rows are gone; the tagged 1 is readable"
    restored = table.restore("first", now=LATER + dt.timedelta(minutes=1))  # a tag kept past retention
    assert restored.table_version == 4 and users(table.to_arrow()) == first
    table.restore(3, now=LATER + dt.timedelta(minutes=2))

    # Untagged, it goes at the next reap that looks at its partition.
    table.untag("first")
    lake.reap(now=LATER + dt.timedelta(hours=1), full=True)
    with pytest.raises(VersionOutOfRange):
        table.to_arrow(as_of_version=1)
    assert table.scan().count() == 30 and table.version == 5


def test_reap_keeps_the_small_objects_a_tagged_version_shows_after_a_compaction(deployment: Deployment) -> None:
    lake = Lake(deployment)
    for name, seed in (("access", 0), ("other", 5)):
        record = make_table(deployment, name)
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, seed), rows_for(DAY, 10, seed + 1)])
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # version 1: DAY's small objects, DAY closed
    table, other = lake.table("web.access"), lake.table("web.other")
    rows = users(table.to_arrow())
    table.tag("before-compaction", version=1)
    for handle in (table, other):
        handle.maintenance.compact(dates=DAY, now=tokyo(NEXT_DAY, 2))  # version 2: DAY's merged object
    report = lake.reap(now=LATER)
    assert report.reasons["covered"].objects == 2, "other's two small objects; the tagged version's stay"
    assert users(table.to_arrow(as_of_version="before-compaction")) == rows
    assert [f.rows for f in table.scan(as_of_version="before-compaction").data_files()] == [10, 10]
    with pytest.raises(VersionOutOfRange):
        other.to_arrow(as_of_version=1)
    table.untag("before-compaction")
    assert lake.reap(now=LATER + dt.timedelta(hours=1), full=True).reasons["covered"].objects == 2
    assert users(table.to_arrow()) == rows


def test_silt_table_tag_makes_lists_and_removes_tags(plain_deployment: Deployment, monkeypatch) -> None:
    three_versions(plain_deployment)
    silt = silt_in_process(plain_deployment, monkeypatch)
    assert "web.access: tag audit names version 2" in silt("table", "tag", "web.access", "audit", "--version", "2")
    assert json.loads(silt("table", "tag", "web.access", "head", "--json"))["table_version"] == 3
    assert json.loads(silt("table", "tag", "web.access", "--json"))["tags"] == {"audit": 2, "head": 3}
    assert "names version 2; give move=True (--move)" in silt("table", "tag", "web.access", "audit", code=2)
    assert "tag audit names version 3" in silt("table", "tag", "web.access", "audit", "--move")
    assert "tag head (version 3) removed" in silt("table", "tag", "web.access", "head", "--remove")
    assert "audit: version 3" in silt("table", "tag", "web.access")
    assert "has no tag 'nope'" in silt("table", "tag", "web.access", "nope", "--remove", code=2)

"""siltlake's tags on the Iceberg target: a tag is an Iceberg tag on its version's snapshot, made, moved and removed
with siltlake's; neither the publish-time expiry nor reap's expires a tagged version's snapshot, and an engine reads
the tag as siltlake reads it."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_of_version

from .conftest import make_config
from .test_iceberg_follow_changes import times
from .test_merge import make_table

IDENT = ("web", "access")


@pytest.fixture
def three(tmp_path: Path, catalog_url: str) -> Deployment:
    """web.access published to Iceberg on the clock: versions 1, 2 and 3 of today's partition, 4, 6 and 8 rows."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.config.publish.targets = ["iceberg"]
    deployment.init()
    make_table(deployment)
    for version in range(3):
        append(deployment, version)
    yield deployment
    deployment.close()


def append(deployment: Deployment, seed: int, rows: int = 2) -> None:
    """Rows on today's partition, published as one version ((seed + 1) * 2 rows in all after the first three)."""
    users = [seed * 100 + n for n in range(rows if seed else 4)]
    Lake(deployment).table("web.access").append(
        pa.table(
            {
                "utc_event_time": times(len(users), seed * 10),
                "user_id": pa.array(users, pa.int64()),
                "action": ["a"] * len(users),
            }
        )
    )
    report = publish_once(deployment)
    assert not report.target_errors, report.target_errors


def iceberg_table(deployment: Deployment):  # a pyiceberg Table
    return open_catalog(deployment).load_table(IDENT)


def tags(iceberg) -> dict[str, int]:  # a pyiceberg Table: its tags, name -> snapshot id
    return {name: ref.snapshot_id for name, ref in iceberg.metadata.refs.items() if ref.snapshot_ref_type == "tag"}


def users(rows: pa.Table) -> Counter:
    return Counter(rows.column("user_id").to_pylist())


def read_tag(iceberg, name: str) -> Counter:  # how an engine reads VERSION AS OF 'name'
    return users(iceberg.scan(snapshot_id=iceberg.snapshot_by_name(name).snapshot_id).to_arrow())


def test_a_tag_is_an_iceberg_tag_on_its_versions_snapshot(three: Deployment) -> None:
    table = Lake(three).table("web.access")
    table.tag("first", version=1)
    iceberg = iceberg_table(three)
    assert tags(iceberg) == {"first": snapshot_of_version(iceberg, 1).snapshot_id}, "made at once, no publish run"
    assert (
        read_tag(iceberg, "first") == users(table.to_arrow(as_of_version="first"))
        and sum(read_tag(iceberg, "first").values()) == 4
    )

    table.tag("first", version=2, move=True)
    table.tag("main")  # Iceberg's main is its branch: this tag is siltlake's only
    iceberg = iceberg_table(three)
    assert tags(iceberg) == {"first": snapshot_of_version(iceberg, 2).snapshot_id}, "moved with siltlake's"
    assert iceberg.metadata.refs["main"].snapshot_ref_type == "branch"
    assert iceberg.metadata.refs["main"].snapshot_id == snapshot_of_version(iceberg, 3).snapshot_id
    assert read_tag(iceberg, "first") == users(table.to_arrow(as_of_version="first"))

    # An engine's own tag of another name is left alone; siltlake's goes with siltlake's.
    iceberg.manage_snapshots().create_tag(snapshot_of_version(iceberg, 1).snapshot_id, "engine").commit()
    table.untag("first")
    table.untag("main")
    assert tags(iceberg_table(three)) == {"engine": snapshot_of_version(iceberg, 1).snapshot_id}


def test_publish_keeps_a_tagged_snapshot_and_makes_a_missing_tag(three: Deployment) -> None:
    three.config.publish.iceberg.snapshot_retention = 0  # each commit expires every snapshot but the new one
    table = Lake(three).table("web.access")
    append(three, 3)
    iceberg = iceberg_table(three)
    assert [snapshot_of_version(iceberg, v) is not None for v in (1, 2, 3, 4)] == [False, False, False, True]
    table.tag("fourth", version=4)
    # The Iceberg tag lost (as when a process dies between siltlake's tag and Iceberg's): the next version's commit
    # keeps the tagged snapshot all the same, and makes the tag again.
    iceberg_table(three).manage_snapshots().remove_tag("fourth").commit()
    append(three, 4)
    append(three, 5)
    iceberg = iceberg_table(three)
    assert [snapshot_of_version(iceberg, v) is not None for v in (4, 5, 6)] == [True, False, True]
    assert tags(iceberg) == {"fourth": snapshot_of_version(iceberg, 4).snapshot_id}
    assert read_tag(iceberg, "fourth") == users(table.to_arrow(as_of_version="fourth"))


def test_reap_keeps_a_tagged_versions_snapshot_until_the_tag_goes(three: Deployment) -> None:
    lake = Lake(three)
    table = lake.table("web.access")
    table.tag("first", version=1)
    later = dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(days=8)  # past the 7 days' retention
    lake.reap(now=later)
    assert table.versions() == (3, 3) and table.tags == {"first": 1}, "2 reaped, the tagged 1 kept"
    iceberg = iceberg_table(three)
    assert [snapshot_of_version(iceberg, v) is not None for v in (1, 2, 3)] == [True, False, True]
    assert read_tag(iceberg, "first") == users(table.to_arrow(as_of_version="first")), "readable after reap"

    table.untag("first")
    assert tags(iceberg_table(three)) == {}
    lake.reap(now=later + dt.timedelta(hours=1), full=True)
    iceberg = iceberg_table(three)
    assert [snapshot_of_version(iceberg, v) is not None for v in (1, 2, 3)] == [False, False, True]
    assert users(iceberg.scan().to_arrow()) == users(table.to_arrow())

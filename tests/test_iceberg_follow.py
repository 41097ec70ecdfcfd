"""An Iceberg snapshot follows its table version at once, and a crash between the two commits loses and doubles
nothing (siltlake.publish.iceberg.follow).

Writes outside a publish run (an upsert, a delete) commit their Iceberg snapshots before they return. A real
process is SIGKILLed between siltlake's catalog commit and the Iceberg commit (of an upsert, and of a publish run),
and right after the Iceberg commit: Iceberg then shows the version before exactly, or the version itself, and once
anything follows again (the next write or publish run) every version has exactly one snapshot, stamped with the
version's time and holding siltlake's rows.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import VersionOutOfRange
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import VERSION_PROPERTY, open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_of_version, synced_version

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_iceberg_keyed import IDENT, upsert_rows
from .test_merge import DAY, make_table
from .test_upsert import KEYED

NEXT_DAY = DAY + dt.timedelta(days=1)
MS = dt.timedelta(milliseconds=1)
# The child: a deployment from the test's config, killed (SIGKILL, nothing cleaned up) at one point of a write.
CHILD = r"""
import json, os, signal, sys, datetime as dt
import pyarrow as pa
from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.errors import VersionOutOfRange
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg import target as iceberg_target

request = json.load(sys.stdin)
deployment = Deployment(Config.model_validate(request["config"]))

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if request["kill"] == "before iceberg":  # siltlake's catalog commit is done; the Iceberg commit not begun
    iceberg_target.IcebergTarget.follow = die
    iceberg_target.IcebergTarget.sync_partitions = die
else:  # "after iceberg": the Iceberg commit is done; the writer has not returned
    committed = iceberg_target.commit_files
    iceberg_target.commit_files = lambda *args, **kwargs: (committed(*args, **kwargs), die())
if request["write"] == "upsert":
    rows = pa.ipc.open_stream(bytes.fromhex(request["rows"])).read_all()
    Lake(deployment).table("web.access").upsert(rows)
else:
    publish_once(deployment)
print("not killed")
"""


@pytest.fixture
def keyed(tmp_path: Path, catalog_url: str) -> Deployment:
    """A keyed web.access published to Iceberg (no Spark: upserts and publish runs need none): 100 rows on DAY. Every
    write runs on the clock, so a snapshot carries its version's time exactly (a version stamped weeks before the
    table's last change would be moved up to 50 s before it: iceberg.manifests.snapshot_millis)."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.config.publish.targets = ["iceberg"]
    deployment.init()
    record = make_table(deployment, **KEYED)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 100, 0)])
    publish_once(deployment)
    yield deployment
    deployment.close()


def killed(deployment: Deployment, kill: str, write: str, rows: pa.Table | None = None) -> None:
    """Run `write` ("upsert" of `rows`, or "publish") in a child process SIGKILLed at `kill`."""
    sink = pa.BufferOutputStream()
    if rows is not None:
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
    request = {
        "config": deployment.config.model_dump(mode="json", by_alias=True),
        "kill": kill,
        "write": write,
        "rows": sink.getvalue().to_pybytes().hex(),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr[-3000:])


def snapshot_versions(deployment: Deployment) -> list[int]:
    """The siltlake version of each snapshot, in commit order."""
    table = open_catalog(deployment).load_table(IDENT)
    return [int(s.summary[VERSION_PROPERTY]) for s in sorted(table.snapshots(), key=lambda s: s.sequence_number)]


def assert_one_snapshot_a_version_with_its_rows_and_time(deployment: Deployment) -> None:
    lake_table = Lake(deployment).table("web.access")
    first, newest = lake_table.versions()
    assert snapshot_versions(deployment) == list(range(first, newest + 1)), "every version once, none missing"
    iceberg = open_catalog(deployment).load_table(IDENT)
    times = deployment.catalog.version_reads.version_times(lake_table.record.id, first - 1, newest)
    for version in range(first, newest + 1):
        snapshot = snapshot_of_version(iceberg, version)
        assert snapshot.timestamp_ms == millis(times[version]), f"version {version} is stamped with its time"
        assert pairs(iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == pairs(
            lake_table.to_arrow(as_of_version=version)
        ), f"version {version}: Iceberg's rows are siltlake's"
    # By time: between two versions (and after the last) Iceberg's snapshot as of an instant holds siltlake's rows
    # as of it; before the first, PyIceberg finds no snapshot where siltlake refuses the time.
    ordered = [times[v] for v in range(first, newest + 1)]
    for at in [a + (b - a) / 2 for a, b in zip(ordered, ordered[1:], strict=False)] + [ordered[-1] + MS]:
        snapshot = iceberg.snapshot_as_of_timestamp(millis(at))
        assert pairs(iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == pairs(
            lake_table.to_arrow(as_of=at)
        ), f"as of {at}"
    assert iceberg.snapshot_as_of_timestamp(millis(ordered[0] - MS)) is None
    with pytest.raises(VersionOutOfRange):
        lake_table.to_arrow(as_of=ordered[0] - MS)


def millis(at: dt.datetime) -> int:
    """A naive UTC time as Iceberg's milliseconds, rounded up as snapshots are stamped."""
    return -(-((at - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)) // 1000)


def pairs(rows: pa.Table) -> Counter:
    return Counter(zip(rows.column("user_id").to_pylist(), rows.column("action").to_pylist(), strict=True))


def test_an_upsert_and_a_delete_are_in_iceberg_when_they_return(keyed: Deployment) -> None:
    table = Lake(keyed).table("web.access")
    table.upsert(upsert_rows([*range(10), 7_000_000], ("action", "upgraded")))
    assert synced_version(open_catalog(keyed).load_table(IDENT)) == table.version, "no publish run needed"
    table.delete("action = 'upgraded'", dates=DAY)
    assert synced_version(open_catalog(keyed).load_table(IDENT)) == table.version
    assert_one_snapshot_a_version_with_its_rows_and_time(keyed)


@pytest.mark.parametrize("write", ["upsert", "publish"])
def test_a_writer_killed_between_siltlakes_commit_and_icebergs_is_followed_by_the_next(
    keyed: Deployment, write: str
) -> None:
    table = Lake(keyed).table("web.access")
    before = table.version
    if write == "publish":
        add_small_objects(keyed, table.record, NEXT_DAY, [rows_for(NEXT_DAY, 20, 1)])
    killed(keyed, "before iceberg", write, upsert_rows(list(range(20)), ("action", "upgraded")))
    table = Lake(keyed).table("web.access")
    assert table.version == before + 1, "siltlake committed the version"
    iceberg = open_catalog(keyed).load_table(IDENT)
    assert synced_version(iceberg) == before, "Iceberg shows the version before, exactly"
    assert pairs(iceberg.scan().to_arrow()) == pairs(table.to_arrow(as_of_version=before))
    # What comes next follows both: an upsert here, as the next publish run would.
    table.upsert(upsert_rows([50, 51], ("action", "later")))
    assert synced_version(open_catalog(keyed).load_table(IDENT)) == before + 2
    assert_one_snapshot_a_version_with_its_rows_and_time(keyed)


def test_a_writer_killed_after_the_iceberg_commit_leaves_the_version_committed_once(keyed: Deployment) -> None:
    before = Lake(keyed).table("web.access").version
    killed(keyed, "after iceberg", "upsert", upsert_rows(list(range(20)), ("action", "upgraded")))
    assert synced_version(open_catalog(keyed).load_table(IDENT)) == before + 1
    publish_once(keyed)
    Lake(keyed).table("web.access").upsert(upsert_rows([60], ("action", "later")))
    assert_one_snapshot_a_version_with_its_rows_and_time(keyed)

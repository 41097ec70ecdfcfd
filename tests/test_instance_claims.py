"""Two deployments on one lake root configured with one instance key: whoever registered the key first owns
it; the other can neither initialise, claim, reap nor write under it while the owner's catalog is
reachable, and claims it once that catalog is really gone."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from siltlake.catalog import Catalog
from siltlake.catalog.provision import create_postgres_database, drop_postgres_database
from siltlake.clock import utcnow
from siltlake.config import Config
from siltlake.deployment import Deployment, InstanceKeyRefused
from siltlake.errors import SiltError
from siltlake.load import load, parse_load_config
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.reap import ReapRefused, reap_once
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, PG_ADMIN_URL, require_postgres
from .test_stream import event, jsonl_gz, stage

pytestmark = pytest.mark.spark
KEY = "test0001"  # the key of the `deployment` fixture
LATER = dt.timedelta(days=30)


def deployment_at(tmp_path: Path, lake_root: str, catalog_url: str, spark, name: str) -> Deployment:
    """A deployment with its own catalog and staging root, on the shared lake root, configured with KEY."""
    other = Deployment(
        Config.model_validate(
            {
                "instance_key": KEY,
                "catalog": {"url": catalog_url},
                "storage": {"root": lake_root, "staging_root": str(tmp_path / f"staging-{name}")},
                "spark": {"master": "local[2]"},
                "stream": {"settle_time": 0},  # objects are staged whole just before the round
            }
        )
    )
    other.use_spark(spark)
    return other


def sqlite_url(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / name / 'catalog.db'}"


def stream_some(deployment: Deployment, name: str) -> None:
    """Stage one object of three access records and stream it (the staging key names the table)."""
    when = dt.datetime(2026, 11, 20, 3, tzinfo=dt.UTC)
    stage(
        deployment,
        f"f1.web.access/2026/11/20/{name}.jsonl.gz",
        jsonl_gz([event(when + dt.timedelta(minutes=i), i) for i in range(3)]),
    )
    report = stream_once(deployment)
    assert report.records_loaded == 3


def owned_objects(deployment: Deployment) -> dict[str, int]:
    """Every object under KEY with its size; aged past any grace period so that a reap by anyone who does
    not reference them would take them for orphans."""
    found = {info.key: info.size for info in deployment.lake.list(KEY + "/")}
    when = (utcnow() - LATER).replace(tzinfo=dt.UTC).timestamp()
    for key in found:
        os.utime(deployment.lake.path(key), (when, when))
    return found


def objects(deployment: Deployment) -> dict[str, int]:
    return {info.key: info.size for info in deployment.lake.list(KEY + "/")}


def register_key_as_old_init_did(deployment: Deployment) -> None:
    """The state `silt init` used to leave: the key registered in the catalog, the other's marker kept."""
    deployment.catalog.upgrade()
    deployment.catalog.instances.register(KEY, deployment.lake.root, is_self=True)
    deployment.catalog.instances.ensure_catalog_id()


def load_config(tmp_path: Path):  # a LoadConfig
    inputs = tmp_path / "inputs"
    inputs.mkdir(exist_ok=True)
    (inputs / "a.csv").write_text("id,time\n1,2026-11-20 10:00:00\n")
    return parse_load_config(
        {
            "in": {"path": str(inputs / "*.csv")},
            "parser": {
                "type": "csv",
                "columns": [
                    {"name": "id", "type": "long"},
                    {"name": "time", "type": "timestamp", "format": "%Y-%m-%d %H:%M:%S", "zone": "Asia/Tokyo"},
                ],
            },
            "out": {"table": "web.loaded", "create": True, "time_column": "time", "timezone": "Asia/Tokyo"},
        }
    )


def attempts(intruder: Deployment, tmp_path: Path) -> dict[str, Callable[[], object]]:
    return {
        "init": intruder.init,
        "claim": lambda: intruder.init(claim=True),
        "reap": lambda: reap_once(intruder, now=utcnow() + LATER),
        "stream": lambda: stream_once(intruder),
        "merge": lambda: merge_once(intruder),
        "publish": lambda: publish_once(intruder),
        "load": lambda: load(intruder, load_config(tmp_path)),
    }


@pytest.fixture
def owner(deployment: Deployment, access_table) -> Deployment:
    stream_some(deployment, "owner")
    return deployment


@pytest.mark.parametrize("registered", [False, True], ids=["fresh", "registered-by-old-init"])
def test_every_order_of_init_claim_reap_and_a_stream_by_the_second_deployment_deletes_nothing_of_the_owners(
    owner: Deployment, tmp_path: Path, spark, registered: bool
) -> None:
    before = owned_objects(owner)
    assert any("/live/" in key for key in before)
    order_names = ("init", "claim", "reap", "stream")
    for number, order in enumerate(itertools.permutations(order_names)):
        intruder = deployment_at(tmp_path, owner.lake.root, sqlite_url(tmp_path, f"b{number}"), spark, f"b{number}")
        intruder.staging.ensure_root()
        # Staged data of its own: a stream that got through would write under the owner's key.
        stage(
            intruder,
            "f1.web.access/2026/11/20/intruder.jsonl.gz",
            jsonl_gz([event(dt.datetime(2026, 11, 20, 4, tzinfo=dt.UTC), 99)]),
        )
        if registered:
            register_key_as_old_init_did(intruder)
        tries = attempts(intruder, tmp_path)
        for name in order:
            # A catalog that never registered the key stops reap and stream earlier: "run `silt init`".
            expected = {
                "init": InstanceKeyRefused,
                "claim": InstanceKeyRefused,
                "reap": ReapRefused if registered else SiltError,
                "stream": InstanceKeyRefused if registered else SiltError,
            }[name]
            with pytest.raises(expected) as refused:
                tries[name]()
            message = str(refused.value)
            if name == "init":
                assert "belongs to another deployment's catalog" in message and "silt init --claim" in message
                assert owner.catalog.masked_url in message, "names the owner's catalog"
            if name == "claim":
                assert "still registers the key" in message and "another instance_key" in message
            assert "\n" not in message
        intruder.close()
        assert objects(owner) == before, f"after {order}"
    # The owner itself is untouched by all that: its catalog keeps its key, its reap keeps its objects.
    assert owner.catalog.instances.self_key() == KEY
    assert reap_once(owner, now=utcnow() + LATER).reasons["orphan"].objects == 0
    assert objects(owner) == before


def test_writers_refuse_a_key_whose_marker_names_another_catalog(owner: Deployment, tmp_path: Path, spark) -> None:
    before = owned_objects(owner)
    intruder = deployment_at(tmp_path, owner.lake.root, sqlite_url(tmp_path, "b"), spark, "b")
    register_key_as_old_init_did(intruder)
    intruder.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    intruder.staging.ensure_root()
    stage(
        intruder,
        "f1.web.access/2026/11/20/intruder.jsonl.gz",
        jsonl_gz([event(dt.datetime(2026, 11, 20, 4, tzinfo=dt.UTC), 99)]),
    )
    tries = attempts(intruder, tmp_path)
    for action in ("stream", "merge", "publish", "load"):
        with pytest.raises(
            InstanceKeyRefused,
            match=f"refusing to {action}: instance key '{KEY}' belongs to another deployment's catalog",
        ):
            tries[action]()
    assert intruder.catalog.staging.pending(10) == [], "the stream stopped before registering anything"
    assert objects(owner) == before
    intruder.close()
    # The owner's own runs pass the same check.
    stream_once(owner)
    merge_once(owner)
    publish_once(owner)


def test_a_writer_refuses_until_init_writes_the_missing_marker(owner: Deployment) -> None:
    owner.lake.delete(f"{KEY}/_instance.json")
    with pytest.raises(InstanceKeyRefused, match="_instance.json is missing.*run `silt init`"):
        stream_once(owner)
    owner.init()
    stream_once(owner)


@pytest.mark.parametrize("owner_kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_the_claim_succeeds_once_the_owners_catalog_is_really_gone(tmp_path: Path, spark, owner_kind: str) -> None:
    """The owner's SQLite catalog is deleted, or its PostgreSQL database dropped; the claimer is SQLite."""
    lake_root = str(tmp_path / "lake")
    if owner_kind == "postgresql":
        require_postgres()
        name = f"silt_test_owner_{os.getpid()}"
        owner_url = create_postgres_database(PG_ADMIN_URL, name, replace=True)
    else:
        owner_url = sqlite_url(tmp_path, "owner")
    owner = deployment_at(tmp_path, lake_root, owner_url, spark, "owner")
    try:
        owner.init()
        owner.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        stream_some(owner, "owner")
        theirs = owned_objects(owner)
        claimer = deployment_at(tmp_path, lake_root, sqlite_url(tmp_path, "claimer"), spark, "claimer")
        with pytest.raises(InstanceKeyRefused, match="still registers the key"):
            claimer.init(claim=True)
    finally:  # the owner's catalog goes for good
        owner.close()
        if owner_kind == "postgresql":
            drop_postgres_database(PG_ADMIN_URL, name)
        else:
            (tmp_path / "owner" / "catalog.db").unlink()
    with pytest.raises(
        InstanceKeyRefused, match="only after checking that the catalog at .* is really gone, run `silt init --claim`"
    ):
        claimer.init()
    with pytest.raises(SiltError, match="run `silt init`"):  # the refused init registered nothing
        reap_once(claimer, now=utcnow() + LATER)
    assert objects(claimer) == theirs
    assert claimer.init(claim=True) == KEY
    marker = json.loads(claimer.lake.read_bytes(f"{KEY}/_instance.json"))
    assert (marker["catalog"], marker["catalog_id"]) == (
        claimer.catalog.masked_url,
        claimer.catalog.instances.catalog_id(),
    )
    # Now the key is the claimer's: the gone deployment's objects are its orphans.
    report = reap_once(claimer, now=utcnow() + LATER)
    assert report.reasons["orphan"].objects == len(theirs) - 1, "all but the marker, now the claimer's"
    assert set(objects(claimer)) == {f"{KEY}/_instance.json"}
    claimer.close()


def test_one_catalog_under_another_url_is_itself_and_a_copy_is_not(
    deployment: Deployment, catalog_url: str, tmp_path: Path, spark, monkeypatch
) -> None:
    lake_root = deployment.lake.root
    if catalog_url.startswith("sqlite"):
        # A relative path and the absolute one are one file (the marker names the absolute path).
        monkeypatch.chdir(tmp_path)
        alias = "sqlite:///catalog.db"
    else:
        alias = catalog_url.replace("@127.0.0.1:", "@localhost:")
        assert alias != catalog_url
    same = deployment_at(tmp_path, lake_root, alias, spark, "same")
    assert same.init() == KEY
    assert same.check_instance("stream") == KEY
    marker = json.loads(deployment.lake.read_bytes(f"{KEY}/_instance.json"))
    assert marker["catalog"] == deployment.catalog.masked_url, "the marker still names the first URL"
    if not catalog_url.startswith("sqlite"):
        assert same.catalog.masked_url != marker["catalog"], "recognised by its id and its database"
    same.close()

    # A copy has the same id, but is another database: refused, while the original can be opened.
    copy_url = sqlite_url(tmp_path, "copy")
    copy = deployment_at(tmp_path, lake_root, copy_url, spark, "copy")
    copy.catalog.upgrade()
    copy.catalog.instances.register(KEY, lake_root, is_self=True)
    with copy.catalog.engine.begin() as c:  # give it the original's id, as copying the database would
        c.exec_driver_sql(
            "UPDATE instances SET description = ? WHERE is_self", (deployment.catalog.instances.catalog_id(),)
        )
    with pytest.raises(InstanceKeyRefused, match="of which this catalog is a copy"):
        copy.check_instance("merge")
    copy.close()


def test_markers_written_before_catalog_ids_are_judged_by_url_and_database(
    deployment: Deployment, catalog_url: str, tmp_path: Path
) -> None:
    marker = f"{KEY}/_instance.json"

    def write_old_marker(url: str) -> None:
        deployment.lake.write_bytes(marker, json.dumps({"instance_key": KEY, "catalog": f"Catalog({url})"}).encode())

    # Its own URL, as `repr(catalog)` wrote it: ours; `silt init` adds the catalog id.
    write_old_marker(deployment.catalog.masked_url)
    assert deployment.check_instance("stream") == KEY
    deployment.init()
    assert json.loads(deployment.lake.read_bytes(marker))["catalog_id"] == deployment.catalog.instances.catalog_id()
    if not catalog_url.startswith("sqlite"):
        # The same database under another host name: ours too.
        write_old_marker(deployment.catalog.masked_url.replace("@127.0.0.1:", "@localhost:"))
        assert deployment.check_instance("publish") == KEY
    # A catalog that is gone, or another database: not ours.
    for other in (sqlite_url(tmp_path, "gone"), sqlite_url(tmp_path, "elsewhere")):
        if other.endswith("elsewhere/catalog.db"):
            elsewhere = Catalog(other)
            elsewhere.upgrade()
            elsewhere.close()
        write_old_marker(other)
        with pytest.raises(InstanceKeyRefused, match="belongs to another deployment's catalog.*silt init --claim"):
            deployment.check_instance("merge")
        assert not (tmp_path / "gone").exists(), "a gone SQLite catalog is not created by looking at it"

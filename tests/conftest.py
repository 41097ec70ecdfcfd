"""Shared fixtures: one SparkSession per test session, catalogs on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import settings

from siltlake.catalog import Catalog
from siltlake.catalog.provision import create_postgres_database, drop_postgres_database
from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.tabledef import TableDef

# The S3 suite's fixtures (tests/s3_server.py). Its AWS settings are set here, before Spark starts, so that
# Spark's Python workers inherit them as on a user's host; tests never reach AWS (no instance metadata either).
pytest_plugins = ["tests.s3_server"]
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "siltlake-tests",
        "AWS_SECRET_ACCESS_KEY": "siltlake-tests",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }
)
# Every JVM the suite starts (the session's, and each `silt` process's, which inherit the environment) lives
# seconds to minutes over tiny data: C2's compile threads and the parallel collector only compete for the two
# cores then. The client compiler alone and the serial collector halve a Spark start on a busy 2-core machine.
# SPARK_SUBMIT_OPTS reaches the driver JVM without touching spark.driver.extraJavaOptions, which tests inspect.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# CI replays the same examples every run (a failure there is reproducible); local runs keep exploring.
# No deadlines: the 2-core machine is shared with Spark, and timing is the benchmarks' job.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")

# Taken out of the environment: `silt` processes the tests start read every SILTLAKE_* variable as a setting.
PG_ADMIN_URL = os.environ.pop("SILTLAKE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
# `make test-fast` (SILT_TEST_FAST=1) runs the tests that need no JVM and no PostgreSQL server. There, a test that
# asks for the session's Spark or for PostgreSQL, or opens a PostgreSQL connection, fails naming the marker it
# lacks (the lane's -m expression leaves marked tests out; pytest_collection_modifyitems marks most of them), and
# JAVA_HOME names no Java, so a Spark started anyhow (a `silt` process's included) fails too.
FAST_LANE = os.environ.get("SILT_TEST_FAST") == "1"
if FAST_LANE:
    os.environ["JAVA_HOME"] = "/nonexistent/the-fast-lane-starts-no-java"
ACCESS_TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "utc_event_time",
    "timezone": "Asia/Tokyo",
    "merge_interval": "12h",
    "columns": [
        {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
        {"name": "user_id", "type": "bigint"},
        {"name": "action", "type": "string"},
    ],
}


def _pg_reachable() -> str | None:
    try:
        engine = sa.create_engine(PG_ADMIN_URL)
        with engine.connect():
            pass
        engine.dispose()
        return None
    except Exception as exc:  # any connection failure means: no server here
        return f"PostgreSQL at {PG_ADMIN_URL} is unreachable: {type(exc).__name__}"


_PG_PROBLEM = None if FAST_LANE else _pg_reachable()


def _fast_lane_refuses(what: str, marker: str) -> None:
    pytest.fail(
        f"the fast lane (SILT_TEST_FAST=1, make test-fast) {what}: mark this test {marker} "
        f"(tests/conftest.py's pytest_collection_modifyitems marks the tests it can tell)",
        pytrace=False,
    )


def require_postgres() -> None:
    if FAST_LANE:
        _fast_lane_refuses("has no PostgreSQL", "postgres")
    if _PG_PROBLEM is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{_PG_PROBLEM} (CI=true: PostgreSQL tests must run)")
    pytest.skip(_PG_PROBLEM)


@pytest.fixture
def postgres_url():
    """A fresh PostgreSQL database, dropped afterwards."""
    require_postgres()
    name = f"silt_test_{uuid.uuid4().hex[:12]}"
    url = create_postgres_database(PG_ADMIN_URL, name)
    yield url
    drop_postgres_database(PG_ADMIN_URL, name)  # a fresh connection: a test may have restarted the server


# Fixtures that initialise the catalog they are given start from a copy of one migrated at the session's start:
# running every migration takes 0.3 s on SQLite and 1-1.5 s on PostgreSQL, per test. The copy is exactly what
# `upgrade()` leaves (no instance, no catalog id); Deployment.init() then does the rest as on a fresh catalog.
_MIGRATED_BY = {"deployment", "plain_deployment", "hive_deployment", "lake"}  # each calls Deployment.init()


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("catalog_template") / "catalog.db"
    catalog = Catalog(f"sqlite:///{path}")
    catalog.upgrade()
    catalog.close()
    return path


@pytest.fixture(scope="session")
def migrated_postgres() -> str:
    """The name of a PostgreSQL database at the head revision, the template of the tests' migrated catalogs."""
    require_postgres()
    name = f"silt_template_{uuid.uuid4().hex[:12]}"
    catalog = Catalog(create_postgres_database(PG_ADMIN_URL, name))
    catalog.upgrade()
    catalog.close()  # CREATE DATABASE ... TEMPLATE needs the template without connections
    yield name
    drop_postgres_database(PG_ADMIN_URL, name)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def catalog_url(request, tmp_path: Path) -> str:
    """An empty catalog, or one at the head revision for the fixtures that initialise it (_MIGRATED_BY)."""
    migrated = bool(_MIGRATED_BY & set(request.fixturenames))
    if request.param == "sqlite":
        if migrated:
            shutil.copyfile(request.getfixturevalue("migrated_sqlite"), tmp_path / "catalog.db")
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    if not migrated:
        return request.getfixturevalue("postgres_url")
    name = f"silt_test_{uuid.uuid4().hex[:12]}"
    url = create_postgres_database(PG_ADMIN_URL, name, template=request.getfixturevalue("migrated_postgres"))
    request.addfinalizer(lambda: drop_postgres_database(PG_ADMIN_URL, name))
    return url


@pytest.fixture
def catalog(catalog_url: str) -> Catalog:
    """A catalog at the head revision, on SQLite and PostgreSQL."""
    catalog = Catalog(catalog_url)
    catalog.upgrade()
    yield catalog
    catalog.close()


@pytest.fixture(scope="session")
def hive_metastore_dir(tmp_path_factory) -> Path:
    """The embedded (Derby) Hive metastore of the test session's Spark: Derby boots on first use only."""
    return tmp_path_factory.mktemp("metastore")


@pytest.fixture(scope="session")
def spark(hive_metastore_dir: Path):
    from siltlake.config import HiveTargetConfig, SparkConfig
    from siltlake.spark import hive_session_conf, spark_session

    if FAST_LANE:
        _fast_lane_refuses("starts no Spark", "spark")
    # Hive-enabled so the hive publish target can be tested in-process (one JVM, one metastore); tests
    # that never touch the metastore pay nothing for it.
    session = spark_session(
        SparkConfig(master="local[2]", app_name="siltlake-tests", conf={"spark.sql.shuffle.partitions": "2"}),
        hive_session_conf(HiveTargetConfig(metastore_dir=str(hive_metastore_dir))),
    )
    yield session
    session.stop()


# Fixtures that reach a PostgreSQL server (directly or through the fixtures they use).
_POSTGRES_FIXTURES = {"postgres_url", "migrated_postgres"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks `spark` every test that uses the session's Spark (directly or through a fixture that does: the
    deployment, access_table, s3_deployment...) and `postgres` every test on a PostgreSQL catalog or database,
    so that `-m "not spark and not postgres"` (make test-fast) leaves them all out."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "spark" in names:
            item.add_marker(pytest.mark.spark)
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("catalog_url") == "postgresql"
        if on_postgres or names & _POSTGRES_FIXTURES:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(autouse=True, scope="session")
def _fast_lane_connects_to_no_postgres():
    """In the fast lane, a connection to the tests' PostgreSQL server opened anyhow (a test's own engine
    included) fails the test. Connections to a closed port (the outage tests') still fail as they should."""
    if not FAST_LANE:
        yield
        return
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    def address(host: object, port: object) -> tuple[str, str]:
        host = str(host or "localhost")
        return ("loopback" if host in {"localhost", "127.0.0.1", "::1"} else host), str(port or 5432)

    admin = sa.engine.make_url(PG_ADMIN_URL)
    server = address(admin.host, admin.port)
    connect = psycopg.Connection.connect.__func__

    def guarded(cls: type[psycopg.Connection], conninfo: str = "", **kwargs: object) -> psycopg.Connection:
        params = conninfo_to_dict(conninfo, **kwargs)
        if address(params.get("host"), params.get("port")) == server:
            _fast_lane_refuses("opens no connection to the PostgreSQL server", "postgres")
        return connect(cls, conninfo, **kwargs)

    mp = pytest.MonkeyPatch()
    mp.setattr(psycopg.Connection, "connect", classmethod(guarded))
    mp.setattr(psycopg, "connect", psycopg.Connection.connect)
    yield
    mp.undo()


def make_config(tmp_path: Path, catalog_url: str, **stream: object) -> Config:
    return Config.model_validate(
        {
            "instance_key": "test0001",
            "catalog": {"url": catalog_url},
            "storage": {"root": str(tmp_path / "lake"), "staging_root": str(tmp_path / "staging")},
            "spark": {"master": "local[2]"},
            # Files written just before a round are taken at once (stream.settle_time: tests that settle set it).
            "stream": {"settle_time": 0, **stream},
        }
    )


@pytest.fixture
def objects_alone(request: pytest.FixtureRequest) -> None:
    """The `deployment` fixture's objects each decoded and committed alone (stream.group_bytes = 0): for tests of
    the per-object machinery (stand-in tasks, per-object commits); tests/test_stream_groups.py covers groups."""
    if "deployment" in request.fixturenames:
        request.getfixturevalue("deployment").config.stream.group_bytes = 0


@pytest.fixture
def deployment(tmp_path: Path, catalog_url: str, spark) -> Deployment:
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    deployment.use_spark(spark)
    yield deployment
    deployment.close()


@pytest.fixture
def appending(tmp_path: Path, catalog_url: str, spark) -> Deployment:
    """The access table on Spark, in rounds that list the root whole (every growth seen at once) and take what is
    written at once: for the tests of files written in place."""
    deployment = Deployment(make_config(tmp_path, catalog_url, full_listing_interval=0))
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    yield deployment
    deployment.close()


@pytest.fixture
def plain_deployment(tmp_path, catalog_url: str) -> Deployment:
    """A deployment without Spark, with the access table."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    yield deployment
    deployment.close()


@pytest.fixture
def access_table(deployment: Deployment):
    return deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))

"""The Iceberg publish target: Iceberg tables over siltlake's own objects, one snapshot per table version.

PyIceberg reads every snapshot back; the walk-through in test_table_api.py compares it with every other
engine at every version. These tests cover what a table goes through besides versions (renames, added and
widened columns, drops), reap (expiring snapshots before their files go, deleting unneeded metadata), a
publish run that died after its Iceberg commit, and where the Iceberg catalog lives.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pytest
from pyiceberg.types import LongType, NestedField, StringType

from siltlake.catalog.core import normalise_url
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import RUN_PROPERTY, VERSION_PROPERTY, open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_files, snapshot_of_version
from siltlake.publish.iceberg.target import IcebergTarget
from siltlake.reap import reap_once
from siltlake.write.update import delete_rows

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark  # the deployment fixture starts the test session's Spark
NEXT_DAY = DAY + dt.timedelta(days=1)
STATUS_COLUMNS = [
    {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
    {"name": "user_id", "type": "bigint"},
    {"name": "action", "type": "string"},
    {"name": "status", "type": "int"},
]


def with_iceberg(deployment: Deployment) -> Deployment:
    deployment.config.publish.targets = ["iceberg"]
    return deployment


def rows(date: dt.date, count: int, seed: int, **extra: object) -> list[dict]:
    return [{**row, "status": 200 + row["user_id"] % 3, **extra} for row in rows_for(date, count, seed)]


def users(table) -> Counter:  # a pyarrow Table
    return Counter(table.column("user_id").to_pylist())


def published(deployment: Deployment, now: dt.datetime) -> list[str]:
    report = publish_once(deployment, now=now)
    assert not report.target_errors, report.target_errors
    return report.external


def assert_same_as_siltlake(deployment: Deployment, name: str, ident: tuple[str, str]) -> None:
    """The current snapshot lists exactly the newest version's files, each once; its rows are that version's."""
    table = Lake(deployment).table(name)
    iceberg = open_catalog(deployment).load_table(ident)
    snapshot = iceberg.current_snapshot()
    assert snapshot.summary[VERSION_PROPERTY] == str(table.version)
    listed = [f.file_path for f in snapshot_files(iceberg, snapshot)]
    assert len(listed) == len(set(listed)), "a file listed twice"
    assert sorted(listed) == sorted(unquote(uri) for uri in table.files(as_of_version=table.version))
    assert users(iceberg.scan().to_arrow()) == users(table.to_arrow(as_of_version=table.version))


def test_renames_added_columns_widened_types_and_dropped_tables_follow(deployment: Deployment) -> None:
    with_iceberg(deployment)
    record = make_table(deployment, columns=STATUS_COLUMNS)
    catalog = deployment.catalog
    add_small_objects(deployment, record, DAY, [rows(DAY, 10, 0)])
    external = published(deployment, tokyo(DAY, 12))
    assert any(s.startswith("iceberg: CREATE TABLE web.access PARTITIONED BY (dt)") for s in external), external
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))

    catalog.tables.rename("web.access", "shop.visits")
    record = catalog.tables.add_column(
        "shop.visits", _column("referrer", "string"), now=tokyo(DAY, 12) + dt.timedelta(minutes=1)
    )
    record = catalog.tables.alter_column_type(
        "shop.visits", "status", "bigint", now=tokyo(DAY, 12) + dt.timedelta(minutes=2)
    )
    add_small_objects(deployment, record, DAY, [rows(DAY, 10, 1, referrer="r")])
    external = published(deployment, tokyo(DAY, 13))
    assert "iceberg: RENAME TABLE web.access TO shop.visits" in external, external
    iceberg_catalog = open_catalog(deployment)
    assert not iceberg_catalog.table_exists(("web", "access"))
    iceberg = iceberg_catalog.load_table(("shop", "visits"))
    schema = iceberg.schema()
    assert [f.name for f in schema.fields] == ["utc_event_time", "user_id", "action", "status", "dt", "referrer"]
    assert schema.find_field("status").field_type == LongType()
    assert schema.find_field("referrer").field_type == StringType()
    scanned = iceberg.scan().to_arrow()
    assert scanned.schema.field("status").type.bit_width == 64
    by_user = dict(
        zip(
            scanned.column("user_id").to_pylist(),
            zip(scanned.column("status").to_pylist(), scanned.column("referrer").to_pylist(), strict=True),
            strict=True,
        )
    )
    assert by_user == {
        r["user_id"]: (r["status"], "r" if r["user_id"] >= 1_000_000 else None)
        for r in rows(DAY, 10, 0) + rows(DAY, 10, 1)
    }, "older objects read the widened column as bigint and the added one as null"
    assert_same_as_siltlake(deployment, "shop.visits", ("shop", "visits"))
    # The table's first snapshot still reads as it was (the old schema's files, by name).
    first = snapshot_of_version(iceberg, 1)
    assert users(iceberg.scan(snapshot_id=first.snapshot_id).to_arrow()) == Counter(range(10))

    metadata = record.layout(deployment.instance_key).iceberg_location()
    assert any(deployment.lake.list(metadata + "/"))
    catalog.tables.drop("shop.visits")
    external = published(deployment, tokyo(DAY, 14))
    assert "iceberg: DROP TABLE shop.visits" in external
    assert not open_catalog(deployment).table_exists(("shop", "visits"))
    reap_once(deployment, now=utcnow() + dt.timedelta(days=4))
    assert not list(deployment.lake.list(metadata + "/")), "reap deletes a dropped table's Iceberg metadata"


def _column(name: str, kind: str):  # a Column
    from siltlake.tabledef import Column

    return Column.from_mapping({"name": name, "type": kind})


def merged_after_two_versions(deployment: Deployment) -> None:
    """Two published versions of DAY (10 rows each), then DAY merged and switched: version 3 over one merged
    object."""
    with_iceberg(deployment)
    record = make_table(deployment)
    for seed, hour in ((0, 12), (1, 13)):
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, seed)])
        published(deployment, tokyo(DAY, hour))
    merge_once(deployment)
    published(deployment, tokyo(NEXT_DAY, 1))  # closes DAY
    published(deployment, tokyo(NEXT_DAY, 2))  # switches it: a compaction version over one merged object


def test_reap_expires_snapshots_before_deleting_the_files_they_list(deployment: Deployment) -> None:
    lake = deployment.lake
    merged_after_two_versions(deployment)
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary[VERSION_PROPERTY] for s in iceberg.snapshots()] == ["1", "2", "3"]
    small = {f.file_path for f in snapshot_files(iceberg, snapshot_of_version(iceberg, 2))}
    assert all("/live/" in path for path in small)

    # Inside the retention (counted from the versions' publish times, the clock given above): every version and
    # every snapshot stays, whatever today's date is.
    reap_once(deployment, now=tokyo(NEXT_DAY, 3))
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert len(iceberg.snapshots()) == 3
    for snapshot in iceberg.snapshots():
        assert users(iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()), "each snapshot still reads"
    manifest_lists = [s.manifest_list for s in iceberg.snapshots()]

    reap_once(deployment, now=utcnow() + dt.timedelta(days=8))
    assert Lake(deployment).table("web.access").versions() == (3, 3)
    assert not any(lake.exists(lake.key_of(path.removeprefix("file://"))) for path in small), (
        "the covered small objects are gone"
    )
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary[VERSION_PROPERTY] for s in iceberg.snapshots()] == ["3"], (
        "the snapshots listing them were expired first"
    )
    for snapshot in iceberg.snapshots():
        for f in snapshot_files(iceberg, snapshot):
            assert Path(f.file_path.removeprefix("file://")).exists(), f"a retained snapshot lists a deleted {f}"
    assert users(iceberg.scan().to_arrow()) == Counter(range(10)) + Counter(range(1_000_000, 1_000_010))
    gone = [path for path in manifest_lists[:2]]
    assert not any(Path(p.removeprefix("file://")).exists() for p in gone), "expired snapshots' manifest lists go"
    assert Path(iceberg.metadata_location.removeprefix("file://")).exists()
    assert Path(manifest_lists[2].removeprefix("file://")).exists()


def test_reap_expires_a_snapshot_an_engine_tagged_and_the_tag_with_it(deployment: Deployment) -> None:
    """A tag made in an engine (CREATE TAG) on a snapshot whose version reap expires: reap must not stop on it (its
    files are deleted with the version), and the tag goes with the snapshot."""
    merged_after_two_versions(deployment)
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    iceberg.manage_snapshots().create_tag(snapshot_of_version(iceberg, 1).snapshot_id, "before_merge").commit()

    reap_once(deployment, now=utcnow() + dt.timedelta(days=8))
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary[VERSION_PROPERTY] for s in iceberg.snapshots()] == ["3"]
    assert set(iceberg.metadata.refs) == {"main"}, "the tag of the expired snapshot is gone with it"
    assert users(iceberg.scan().to_arrow()) == Counter(range(10)) + Counter(range(1_000_000, 1_000_010))


def test_filters_on_dt_and_on_column_bounds_select_the_same_rows_as_siltlake(deployment: Deployment) -> None:
    """Engines prune files by partition and by the column bounds registered from the Parquet footers: wrong
    bounds or partition values would drop rows silently."""
    import pyarrow.compute as pc

    with_iceberg(deployment)
    record = make_table(deployment)
    for seed, date in enumerate((DAY, DAY, NEXT_DAY)):
        add_small_objects(deployment, record, date, [rows_for(date, 10, seed)])
    published(deployment, tokyo(NEXT_DAY, 12))
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    table = Lake(deployment).table("web.access").to_arrow()
    times = sorted(table.column("utc_event_time").to_pylist())
    middle = times[len(times) // 2]
    user_range = (pc.field("user_id") >= 1000005) & (pc.field("user_id") < 2000003)
    cases = [
        (f"dt = '{DAY}'", pc.field("dt") == DAY, 2),  # the day's two files: partition pruning
        (f"dt > '{DAY}'", pc.field("dt") > DAY, 1),
        (f"utc_event_time >= '{middle.isoformat()}'", pc.field("utc_event_time") >= middle, None),
        ("user_id >= 1000005 and user_id < 2000003", user_range, 2),
    ]  # seed 0's users 0-9: pruned by bounds
    for text, expression, files in cases:
        expected = users(table.filter(expression))
        assert expected and expected != users(table), text
        assert users(iceberg.scan(row_filter=text).to_arrow()) == expected, text
        if files is not None:
            assert len(list(iceberg.scan(row_filter=text).plan_files())) == files, text


def test_a_partition_reaped_past_its_ttl_leaves_the_current_snapshot_first(deployment: Deployment) -> None:
    with_iceberg(deployment)
    record = make_table(deployment, ttl_days=2)
    later = DAY + dt.timedelta(days=4)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0)])
    add_small_objects(deployment, record, later, [rows_for(later, 10, 1)])
    published(deployment, tokyo(DAY, 12))
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert len(iceberg.scan().to_arrow()) == 20

    report = reap_once(deployment, now=tokyo(later, 12))
    assert report.reasons["ttl"].rows == 1, "the partition of DAY went whole"
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    current = iceberg.current_snapshot()
    assert "siltlake.reap" in current.summary and current.summary[VERSION_PROPERTY] == "1"
    for snapshot in iceberg.snapshots():
        for f in snapshot_files(iceberg, snapshot):
            assert Path(f.file_path.removeprefix("file://")).exists(), f"a snapshot lists the deleted {f.file_path}"
    assert users(iceberg.scan().to_arrow()) == Counter(range(1_000_000, 1_000_010))
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))


def test_a_run_that_died_after_its_iceberg_commit_converges_without_adding_twice(deployment: Deployment) -> None:
    with_iceberg(deployment)
    record = make_table(deployment)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0)])
    published(deployment, tokyo(DAY, 12))
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 1)])
    # Version 2 is committed to siltlake and to Iceberg, then the run dies before anything else.
    deployment.config.publish.targets = []
    publish_once(deployment, now=tokyo(DAY, 13))
    deployment.config.publish.targets = ["iceberg"]
    tables = {t.id: t for t in deployment.catalog.tables.list()}
    target = IcebergTarget(deployment)
    target.sync_tables(list(tables.values()))
    target.sync_partitions(tables)  # commits version 2 ... and the process dies here
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    snapshots = len(iceberg.snapshots())
    assert published(deployment, tokyo(DAY, 14)) == [], "nothing left to commit"
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert len(iceberg.snapshots()) == snapshots
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))

    # Versions published while the target was failing (here: switched off) are caught up one snapshot each.
    deployment.config.publish.targets = []
    for hour, seed in ((15, 2), (16, 3)):
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, seed)])
        publish_once(deployment, now=tokyo(DAY, hour))
    # An update removes the files versions 3 and 4 added: one run adds and then removes them.
    delete_rows(deployment, "web.access", DAY, "user_id % 2 = 0", now=tokyo(DAY, 16) + dt.timedelta(minutes=30))
    deployment.config.publish.targets = ["iceberg"]
    published(deployment, tokyo(DAY, 17))
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary[VERSION_PROPERTY] for s in iceberg.snapshots()] == ["1", "2", "3", "4", "5"]
    for version in (3, 4, 5):
        snapshot = snapshot_of_version(iceberg, version)
        assert snapshot.summary[RUN_PROPERTY] == iceberg.current_snapshot().summary[RUN_PROPERTY]
        assert users(iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == users(
            Lake(deployment).table("web.access").to_arrow(as_of_version=version)
        )
    assert_same_as_siltlake(deployment, "web.access", ("web", "access"))

    # A rename the Iceberg catalog took before the run died: the next run finds the table under its new name.
    open_catalog(deployment).create_namespace_if_not_exists("shop")
    open_catalog(deployment).rename_table(("web", "access"), ("shop", "visits"))
    deployment.catalog.tables.rename("web.access", "shop.visits")
    published(deployment, tokyo(DAY, 18))
    assert_same_as_siltlake(deployment, "shop.visits", ("shop", "visits"))


@pytest.mark.parametrize("owner", ["nobody", "another deployment"])
def test_a_table_of_the_same_name_that_is_not_ours_is_refused(deployment: Deployment, owner: str) -> None:
    with_iceberg(deployment)
    from pyiceberg.schema import Schema

    record = make_table(deployment)
    # Another deployment sharing the Iceberg catalog has its own table ids: the instance key tells them apart.
    properties = {} if owner == "nobody" else {"siltlake.table-id": str(record.id), "siltlake.instance": "othr0001"}
    open_catalog(deployment).create_namespace_if_not_exists("web")
    open_catalog(deployment).create_table(
        ("web", "access"), Schema(NestedField(1, "x", StringType())), properties=properties
    )
    report = publish_once(deployment, now=tokyo(DAY, 12))
    assert report.target_errors == [
        f"iceberg: web.access: Iceberg table web.access already exists and is not siltlake's table web.access "
        f"(table {record.id} of this deployment); drop it there, or set publish.iceberg.namespace_prefix"
    ]
    assert [f.name for f in open_catalog(deployment).load_table(("web", "access")).schema().fields] == ["x"]


def test_a_table_that_fails_is_reported_and_the_others_are_synced(deployment: Deployment) -> None:
    with_iceberg(deployment)
    from pyiceberg.schema import Schema

    refused = make_table(deployment)
    other = make_table(deployment, "visits")
    open_catalog(deployment).create_namespace_if_not_exists("web")
    open_catalog(deployment).create_table(("web", "access"), Schema(NestedField(1, "x", StringType())))
    add_small_objects(deployment, other, DAY, [rows_for(DAY, 10, 0)])
    report = publish_once(deployment, now=tokyo(DAY, 12))
    assert len(report.target_errors) == 1 and "web.access already exists" in report.target_errors[0]
    assert f"table {refused.id}" in report.target_errors[0]
    assert any("CREATE TABLE web.visits" in s for s in report.external), report.external
    assert_same_as_siltlake(deployment, "web.visits", ("web", "visits"))


def test_the_iceberg_catalog_sits_beside_siltlakes(deployment: Deployment) -> None:
    with_iceberg(deployment)
    make_table(deployment)
    published(deployment, tokyo(DAY, 12))
    url = normalise_url(deployment.config.catalog.url)
    engine_url = open_catalog(deployment).engine.url.render_as_string(hide_password=False)
    if url.startswith("sqlite"):
        assert engine_url == str(Path(url.removeprefix("sqlite:///")).with_name("iceberg.db")).join(["sqlite:///", ""])
    else:
        assert engine_url == url, "the deployment's PostgreSQL database holds the iceberg_* tables too"
    assert open_catalog(deployment).table_exists(("web", "access"))
    deployment.catalog.check_ready()  # siltlake's catalog is unaffected by the iceberg_* tables


def test_the_reading_pyiceberg_example_runs(deployment: Deployment, monkeypatch, capsys) -> None:
    from .merge_helpers import point_cli_at

    reading = (Path(__file__).parent.parent / "docs" / "reading.md").read_text(encoding="utf-8")
    section = reading.split("## Iceberg engines (Trino, Spark, DuckDB)", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    with_iceberg(deployment)
    record = make_table(deployment)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0)])
    published(deployment, tokyo(DAY, 12))
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 1)])
    published(deployment, tokyo(DAY, 13))
    point_cli_at(deployment, monkeypatch)  # Lake.open() finds the deployment as `silt` would
    exec(compile(example, "docs/reading.md", "exec"), {})  # the documented example, as a user runs it
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == ["20", "10"] and printed[2].endswith(".metadata.json"), printed


def test_iceberg_settings_are_checked_and_name_the_catalog(tmp_path: Path) -> None:
    from siltlake.config import load_config
    from siltlake.errors import ConfigError
    from siltlake.publish.iceberg.catalog import catalog_uri

    with pytest.raises(
        ConfigError,
        match=r"publish\.iceberg\.catalog_url.*'mysql://db/x' must be a sqlite:///, "
        r"postgresql:// \(SQL catalog\) or http\(s\):// \(REST catalog\) URL",
    ):
        load_config(environ={"SILTLAKE_PUBLISH__ICEBERG__CATALOG_URL": "mysql://db/x"})
    with pytest.raises(ConfigError, match=r"publish\.iceberg\.namespace_prefix"):
        load_config(environ={"SILTLAKE_PUBLISH__ICEBERG__NAMESPACE_PREFIX": "Bad-Prefix"})

    class Bare:  # what catalog_uri reads of a deployment
        def __init__(self, **env: str) -> None:
            self.config = load_config(environ=env)

    assert (
        catalog_uri(Bare(SILTLAKE_PUBLISH__ICEBERG__CATALOG_URL="https://rest.example/catalog"))
        == "https://rest.example/catalog"
    )
    assert catalog_uri(Bare(SILTLAKE_CATALOG__URL="postgres://u@db/silt")) == "postgresql+psycopg://u@db/silt"
    assert (
        catalog_uri(Bare(SILTLAKE_CATALOG__URL=f"sqlite:///{tmp_path}/c/catalog.db"))
        == f"sqlite:///{tmp_path}/c/iceberg.db"
    )

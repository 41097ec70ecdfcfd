"""Catalog schema, migrations and table operations on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.exc import IntegrityError

from siltlake.catalog import Catalog
from siltlake.catalog import schema as s
from siltlake.errors import CatalogError, NotFoundError, SiltError
from siltlake.tabledef import Column, TableDef

from .conftest import ACCESS_TABLE


def test_migrations_from_empty_match_the_schema_and_round_trip(catalog_url: str) -> None:
    catalog = Catalog(catalog_url)
    with pytest.raises(CatalogError, match="silt init"):
        catalog.check_ready()
    catalog.upgrade()
    catalog.check_ready()
    assert catalog.revision() == catalog.head_revision()
    with catalog.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), s.metadata) == []
    catalog.downgrade("base")
    assert catalog.revision() is None
    catalog.upgrade()
    catalog.upgrade()  # idempotent
    assert catalog.revision() == catalog.head_revision()
    catalog.close()


def test_uninitialised_catalog_tells_the_user_to_run_init(tmp_path) -> None:
    catalog = Catalog(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(CatalogError, match="run `silt init`"):
        catalog.tables.list()


def test_table_lifecycle(catalog: Catalog) -> None:
    record = catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    assert (record.physical_schema_name, record.physical_table_name) == ("web", "access")
    with pytest.raises(CatalogError, match="already exists"):
        catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))

    catalog.tables.add_column("web.access", Column(name="referer", type="string"))
    assert [c.name for c in catalog.tables.get("web.access").definition.columns][-1] == "referer"
    with pytest.raises(CatalogError, match="must be nullable"):
        catalog.tables.add_column("web.access", Column(name="x", type="int", nullable=False))
    with pytest.raises(CatalogError, match="already has a column"):
        catalog.tables.add_column("web.access", Column(name="referer", type="string"))

    renamed = catalog.tables.rename("web.access", "logs.hits")
    assert renamed.definition.qualified_name == "logs.hits"
    assert (renamed.physical_schema_name, renamed.physical_table_name) == ("web", "access")
    with pytest.raises(NotFoundError, match="silt table list"):
        catalog.tables.get("web.access")

    catalog.tables.drop("logs.hits")
    assert catalog.tables.list() == []
    # The dropped table's objects still occupy web.access until reaped: a new one gets a new place.
    again = catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    assert again.physical_table_name == "access_2"


def test_qualified_names_are_validated(catalog: Catalog) -> None:
    for bad in ("access", "web.access.x", "../etc.passwd", "web.acc'ess", "Web.Access"):
        with pytest.raises(SiltError, match="schema.table|valid identifier"):
            catalog.tables.get(bad)


def _partition(catalog: Catalog) -> int:
    table = catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    with catalog.partitions.stream_commit() as tx:
        return tx.partition_for(table.id, dt.date(2026, 11, 20), 60, dt.datetime(2026, 11, 20)).id


def test_first_object_of_a_partition_creates_it_and_its_merge_job(catalog: Catalog) -> None:
    partition_id = _partition(catalog)
    jobs = catalog.merge_queue.jobs(partition_id)
    assert len(jobs) == 1
    assert jobs[0]["ongoing_mark"] == 0
    assert jobs[0]["schedule_time"] == dt.datetime(2026, 11, 20, 0, 1)
    (partition,) = catalog.partitions.list(catalog.tables.get("web.access").id)
    assert (partition.current_manifest_version, partition.desired_manifest_version) == (-1, 0)
    assert not partition.closed and not partition.switched


def test_merge_range_constraints(catalog: Catalog) -> None:
    partition_id = _partition(catalog)
    now = dt.datetime(2026, 11, 20)

    def insert(lower, upper):
        with catalog.engine.begin() as c:
            c.execute(
                s.merge_ranges.insert().values(
                    partition_id=partition_id,
                    lower_bound=lower,
                    upper_bound=upper,
                    content_length=0,
                    create_time=now,
                    update_time=now,
                )
            )

    insert(None, 0)
    insert(0, 10)
    insert(10, 25)
    for lower, upper in [(12, 30), (25, 25), (None, 5), (30, 20), (10, 40)]:
        # unchained, empty, second sentinel, decreasing, duplicate lower bound
        with pytest.raises(IntegrityError):
            insert(lower, upper)


def test_one_waiting_merge_job_per_partition(catalog: Catalog) -> None:
    partition_id = _partition(catalog)
    with pytest.raises(IntegrityError), catalog.engine.begin() as c:
        c.execute(
            s.merge_jobs.insert().values(partition_id=partition_id, schedule_time=dt.datetime.now(), ongoing_mark=0)
        )


def test_small_object_ids_increase_and_are_never_reused(catalog: Catalog) -> None:
    with catalog.partitions.stream_commit() as tx:
        first = tx.allocate_ids(3)
    with pytest.raises(RuntimeError), catalog.partitions.stream_commit() as tx:
        tx.allocate_ids(2)
        raise RuntimeError("abort the commit")
    with catalog.partitions.stream_commit() as tx:
        later = tx.allocate_ids(2)
    assert first == sorted(first) and len(set(first)) == 3
    assert min(later) > max(first)


def test_unknown_objects_are_registered_once_and_can_be_replayed(catalog: Catalog) -> None:
    assert catalog.staging.record_unknown("file:///s/a", "no table x.y")
    assert not catalog.staging.record_unknown("file:///s/a", "again")
    assert [u.reason for u in catalog.staging.unknown()] == ["no table x.y"]
    assert catalog.staging.known_uris(["file:///s/a", "file:///s/b"]) == {"file:///s/a"}
    assert catalog.staging.forget_unknown(["file:///s/a"]) == ["file:///s/a"]
    assert catalog.staging.unknown() == []


def test_instance_key_is_fixed_per_catalog(catalog: Catalog) -> None:
    catalog.instances.register("abcd1234", "/lake", is_self=True)
    catalog.instances.register("abcd1234", "/lake", is_self=True)
    assert catalog.instances.self_key() == "abcd1234"
    with pytest.raises(CatalogError, match="already belongs"):
        catalog.instances.register("ffff0000", "/lake", is_self=True)
    catalog.instances.register("ffff0000", "/other", is_self=False)
    with catalog.engine.connect() as c:
        assert c.execute(sa.select(sa.func.count()).select_from(s.instances)).scalar_one() == 2

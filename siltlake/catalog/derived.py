"""Derived tables (docs/design.md): definitions, builds, publishing a build, and the active-build list."""

from __future__ import annotations

import builtins
import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Callable, Collection, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, derived_readers, insert_table, rows_values, table_record
from siltlake.catalog.rows import (
    DERIVED_PARTITION_STATES,
    BuildInProgress,
    BuildPartition,
    BuildRecord,
    DerivedReapView,
    DerivedRecord,
)
from siltlake.derivedef import DerivedDef
from siltlake.errors import CatalogError, NotFoundError, did_you_mean
from siltlake.tabledef import TableDef


def definition_hash(definition: DerivedDef, table: TableDef) -> str:
    """Changes when the query, its rule or its columns change: a new hash means a full rebuild."""
    return hashlib.sha256(f"{definition.to_json()}\n{table.to_json()}".encode()).hexdigest()


def _build(row) -> BuildRecord:  # a derived_builds Row
    return BuildRecord(
        id=row.id,
        derived_id=row.derived_id,
        name=row.name,
        reg_key=row.reg_key,
        status=row.status,
        kind=row.kind,
        owner_host=row.owner_host,
        owner_pid=row.owner_pid,
        start_time=row.start_time,
        heartbeat_time=row.heartbeat_time,
        end_time=row.end_time,
        source_state=json.loads(row.source_state) if row.source_state else None,
        trigger_value=row.trigger_value,
        dates_written=row.dates_written,
        rows_written=row.rows_written,
        bytes_written=row.bytes_written,
        error=row.error,
    )


def derived_table_states(c: Connection, now: dt.datetime) -> dict[int, str]:
    """Each live derived table's partitions' state (DERIVED_PARTITION_STATES), by table id, from the catalog
    alone: stale when a source is at another table version than its last published build read (trigger
    "sources") or that build is persist_for old; else built. A trigger_sql table's query is not run here: its
    partitions show built until a regenerate finds the trigger changed and builds them."""
    d, t, b = s.derived_tables, s.tables, s.derived_builds
    last = (
        sa.select(b.c.derived_id, sa.func.max(b.c.id).label("build_id"))
        .where(b.c.status == "published")
        .group_by(b.c.derived_id)
        .subquery()
    )
    rows = c.execute(
        sa.select(d.c.table_id, d.c.definition, d.c.sources, b.c.source_state, b.c.end_time)
        .select_from(
            d.join(t, t.c.id == d.c.table_id)
            .outerjoin(last, last.c.derived_id == d.c.id)
            .outerjoin(b, b.c.id == last.c.build_id)
        )
        .where(t.c.dropped_time.is_(None))
    ).all()
    versions: dict[int, int] = dict(rows_values(c.execute(sa.select(t.c.id, t.c.version)).all()))
    built, stale = DERIVED_PARTITION_STATES
    states = {}
    for row in rows:
        definition = DerivedDef.from_json(row.definition)
        read = json.loads(row.source_state) if row.source_state else {}
        if definition.rule == "persist_for":
            fresh = row.end_time is not None and (now - row.end_time).total_seconds() < definition.persist_for
        elif definition.rule == "sources":
            fresh = all(
                read.get(str(source), {}).get("version") == versions.get(source) for source in json.loads(row.sources)
            )
        else:
            fresh = True
        states[row.table_id] = built if fresh else stale
    return states


class Derived:
    """Reached as catalog.derived."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    # --- definitions ---------------------------------------------------------------------------------

    def create(
        self, definition: DerivedDef, table: TableDef, source_ids: Sequence[int], now: dt.datetime
    ) -> DerivedRecord:
        """Add the derived table and the table readers read it as, in one transaction."""
        with self._core.tx() as c:
            record = insert_table(c, table, now)
            c.execute(
                s.derived_tables.insert().values(
                    table_id=record.id,
                    definition=definition.to_json(),
                    definition_hash=definition_hash(definition, table),
                    sources=json.dumps(list(source_ids)),
                    create_time=now,
                )
            )
            return self._one(c, s.derived_tables.c.table_id == record.id)

    def _rows(self, c: Connection, *where: sa.ColumnElement) -> list[DerivedRecord]:
        d, t = s.derived_tables, s.tables
        rows = c.execute(
            sa.select(
                d.c.id.label("derived_id"),
                d.c.definition.label("derived_definition"),
                d.c.definition_hash,
                d.c.sources,
                d.c.create_time.label("derived_create_time"),
                t,
            )
            .select_from(d.join(t, t.c.id == d.c.table_id))
            .where(t.c.dropped_time.is_(None), *where)
            .order_by(t.c.schema_name, t.c.table_name)
        ).all()
        return [
            DerivedRecord(
                id=row.derived_id,
                table=table_record(row),
                definition=DerivedDef.from_json(row.derived_definition),
                definition_hash=row.definition_hash,
                source_ids=tuple(json.loads(row.sources)),
                create_time=row.derived_create_time,
            )
            for row in rows
        ]

    def _one(self, c: Connection, *where: sa.ColumnElement) -> DerivedRecord:
        found = self._rows(c, *where)
        if not found:
            raise NotFoundError("no such derived table; `silt derived list` shows them")
        return found[0]

    def list(self) -> list[DerivedRecord]:
        with self._core.tx() as c:
            return self._rows(c)

    def get(self, qualified: str) -> DerivedRecord:
        schema_name, _, table_name = qualified.partition(".")
        with self._core.tx() as c:
            found = self._rows(c, s.tables.c.schema_name == schema_name, s.tables.c.table_name == table_name)
            if not found:
                names = [record.qualified_name for record in self._rows(c)]
                raise NotFoundError(
                    f"no derived table {qualified}{did_you_mean(qualified, names)}; `silt derived list` shows them"
                )
        return found[0]

    def drop(self, qualified: str, now: dt.datetime, dry_run: bool = False) -> DerivedRecord:
        """Drop the derived table (its table is marked dropped; reap removes its builds); dry_run: only refuse
        what a drop would refuse."""
        record = self.get(qualified)
        with self._core.tx() as c:
            readers = derived_readers(c, record.table.id)
            if readers:
                raise CatalogError(f"{qualified} is read by derived table {', '.join(readers)}; drop that first")
            if dry_run:
                return record
            c.execute(
                s.tables.update()
                .where(s.tables.c.id == record.table.id, s.tables.c.dropped_time.is_(None))
                .values(dropped_time=now)
            )
            c.execute(s.active_derived_builds.delete().where(s.active_derived_builds.c.derived_id == record.id))
        return record

    # --- builds ----------------------------------------------------------------------------------------

    def start_build(
        self,
        record: DerivedRecord,
        *,
        reg_key: str,
        catalog_id: str,
        kind: str,
        host: str,
        pid: int,
        now: dt.datetime,
        dead: Callable[[BuildRecord], bool],
    ) -> BuildRecord:
        """Register a build as running; BuildInProgress if another one runs. A running build whose builder
        `dead` says is gone is marked failed first, so a killed build never blocks the table."""
        b = s.derived_builds
        with self._core.tx() as c:
            running = c.execute(sa.select(b).where(b.c.derived_id == record.id, b.c.status == "building")).first()
            if running is not None:
                previous = _build(running)
                if not dead(previous):
                    raise BuildInProgress(
                        f"{record.qualified_name} is being built by process {previous.owner_pid} on "
                        f"{previous.owner_host.split()[0]} since {previous.start_time:%Y-%m-%d %H:%M:%S} UTC "
                        f"(build {previous.name}); wait for it"
                    )
                c.execute(
                    b.update()
                    .where(b.c.id == previous.id, b.c.status == "building")
                    .values(status="failed", end_time=now, error="builder lost: its process is gone or silent")
                )
            try:
                build_id: int = c.execute(
                    b.insert()
                    .values(
                        derived_id=record.id,
                        name=f"pending-{uuid.uuid4().hex}",
                        reg_key=reg_key,
                        status="building",
                        kind=kind,
                        owner_host=host,
                        owner_pid=pid,
                        start_time=now,
                        heartbeat_time=now,
                    )
                    .returning(b.c.id)
                ).scalar_one()
            except IntegrityError:
                raise BuildInProgress(
                    f"{record.qualified_name} is being built by another process; wait for it"
                ) from None
            digest = hashlib.sha256(f"{record.definition_hash}:{catalog_id}:{build_id}".encode()).hexdigest()[:16]
            c.execute(b.update().where(b.c.id == build_id).values(name=f"{reg_key}-{digest}"))
            return _build(c.execute(sa.select(b).where(b.c.id == build_id)).one())

    def heartbeat(self, build_id: int, now: dt.datetime) -> None:
        b = s.derived_builds
        with self._core.tx() as c:
            c.execute(b.update().where(b.c.id == build_id, b.c.status == "building").values(heartbeat_time=now))

    def fail_build(self, build_id: int, error: str, now: dt.datetime) -> None:
        b = s.derived_builds
        with self._core.tx() as c:
            c.execute(
                b.update()
                .where(b.c.id == build_id, b.c.status == "building")
                .values(status="failed", end_time=now, error=error[:4000])
            )

    def builds(self, derived_id: int) -> builtins.list[BuildRecord]:  # `list` here is the method above
        b = s.derived_builds
        with self._core.tx() as c:
            return [_build(row) for row in c.execute(sa.select(b).where(b.c.derived_id == derived_id).order_by(b.c.id))]

    def last_published(self, derived_id: int) -> BuildRecord | None:
        b = s.derived_builds
        with self._core.tx() as c:
            row = c.execute(
                sa.select(b)
                .where(b.c.derived_id == derived_id, b.c.status == "published")
                .order_by(b.c.id.desc())
                .limit(1)
            ).first()
        return _build(row) if row is not None else None

    def publish_build(
        self,
        record: DerivedRecord,
        build: BuildRecord,
        partitions: Sequence[BuildPartition],
        *,
        source_state: dict,
        trigger_value: str | None,
        expire_time: dt.datetime | None,
        now: dt.datetime,
        given: bool = False,
    ) -> int | None:
        """Publish the build's dates as new versions of the derived table's partitions, in one transaction
        (readers see all of them or none), make it active, and return the table version it published (None:
        no date changed).

        Builds published earlier that no partition's newest version comes from any more leave the active list."""
        p, v, b, a = s.partitions, s.partition_versions, s.derived_builds, s.active_derived_builds
        table_id = record.table.id
        with self._core.tx() as c:
            # The row lock orders this against the reaper's mark_lost on PostgreSQL: either the reaper marks the
            # build failed first (and it is not published), or it finds it published and leaves it (SQLite's
            # BEGIN IMMEDIATE serialises the two already).
            status = sa.select(b.c.status).where(b.c.id == build.id)
            state: str = c.execute(
                status.with_for_update() if self._core.dialect == "postgresql" else status
            ).scalar_one()
            if state != "building":
                raise CatalogError(
                    f"build {build.name} of {record.qualified_name} is {state}, not running: "
                    "another process took it over; not published"
                )
            dates = sorted({item.partition_date for item in partitions})
            known: dict[dt.date, int] = dict(
                rows_values(c.execute(sa.select(p.c.partition_date, p.c.id).where(p.c.table_id == table_id)).all())
            )
            missing = [date for date in dates if date not in known]
            if missing:
                c.execute(
                    p.insert(), [dict(table_id=table_id, partition_date=date, create_time=now) for date in missing]
                )
                known = dict(
                    rows_values(c.execute(sa.select(p.c.partition_date, p.c.id).where(p.c.table_id == table_id)).all())
                )
            ids = [known[date] for date in dates]
            newest: dict[int, int] = dict(
                rows_values(
                    c.execute(
                        sa.select(v.c.partition_id, sa.func.max(v.c.version))
                        .where(v.c.partition_id.in_(ids))
                        .group_by(v.c.partition_id)
                    ).all()
                )
            )
            table_version = None  # nothing changed: no new table version
            if partitions:
                table_version, stamp = self._core.new_table_versions(c, [table_id], now, given=given)[table_id]
                c.execute(
                    v.insert(),
                    [
                        dict(
                            partition_id=known[item.partition_date],
                            table_id=table_id,
                            version=newest.get(known[item.partition_date], 0) + 1,
                            commit_op="update",
                            live_watermark=0,
                            manifest_key=item.manifest_key,
                            covered_upper=0,
                            created_at=stamp,
                            row_count=item.row_count,
                            byte_count=item.byte_count,
                            table_version=table_version,
                            file_list_key=item.manifest_key,
                            build_id=build.id,
                        )
                        for item in partitions
                    ],
                )
            c.execute(
                b.update()
                .where(b.c.id == build.id)
                .values(
                    status="published",
                    end_time=now,
                    heartbeat_time=now,
                    source_state=json.dumps(source_state),
                    trigger_value=trigger_value,
                    dates_written=len(partitions),
                    rows_written=sum(item.row_count for item in partitions),
                    bytes_written=sum(item.byte_count for item in partitions),
                )
            )
            c.execute(
                a.insert().values(build_id=build.id, derived_id=record.id, expire_time=expire_time, activate_time=now)
            )
            current = self._current_builds(c, [table_id])
            c.execute(a.delete().where(a.c.derived_id == record.id, a.c.build_id.not_in(sorted(current) or [0])))
        return table_version

    @staticmethod
    def _current_builds(c: Connection, table_ids: Sequence[int]) -> set[int]:
        """Builds that published the newest version of some partition of these tables."""
        p, v = s.partitions, s.partition_versions
        if not table_ids:
            return set()
        newest = (
            sa.select(v.c.partition_id, sa.func.max(v.c.version).label("version"))
            .where(v.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id.in_(list(table_ids)))))
            .group_by(v.c.partition_id)
            .subquery()
        )
        return set(
            c.execute(
                sa.select(v.c.build_id)
                .distinct()
                .select_from(
                    v.join(newest, sa.and_(newest.c.partition_id == v.c.partition_id, newest.c.version == v.c.version))
                )
                .where(v.c.build_id.is_not(None))
            ).scalars()
        )

    def newest_versions(self, table_id: int) -> dict[dt.date, tuple[int, int | None]]:
        """Each partition of the table: its newest version and the build that published it."""
        p, v = s.partitions, s.partition_versions
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(p.c.partition_date, v.c.version, v.c.build_id)
                .select_from(v.join(p, p.c.id == v.c.partition_id))
                .where(p.c.table_id == table_id)
                .order_by(p.c.partition_date, v.c.version)
            ).all()
        return {row.partition_date: (row.version, row.build_id) for row in rows}

    # --- the reaper ------------------------------------------------------------------------------------

    def reap_view(self, expiring: Collection[int] = ()) -> DerivedReapView:
        """What the derived reaper reads, in one snapshot; `expiring` (version row ids a dry run of reap would
        delete first) reference nothing."""
        b, a, v, d, t = s.derived_builds, s.active_derived_builds, s.partition_versions, s.derived_tables, s.tables
        with self._core.snapshot() as c:
            builds = {row.name: _build(row) for row in c.execute(sa.select(b))}
            active: dict[int, dt.datetime | None] = dict(
                rows_values(c.execute(sa.select(a.c.build_id, a.c.expire_time)).all())
            )
            referenced: set[int] = {
                build_id
                for version_id, build_id in rows_values(
                    c.execute(sa.select(v.c.id, v.c.build_id).where(v.c.build_id.is_not(None)))
                )
                if version_id not in expiring
            }
            live: dict[int, int] = dict(
                rows_values(
                    c.execute(
                        sa.select(d.c.id, d.c.table_id)
                        .select_from(d.join(t, t.c.id == d.c.table_id))
                        .where(t.c.dropped_time.is_(None))
                    ).all()
                )
            )
            current = self._current_builds(c, list(live.values()))
        return DerivedReapView(builds, active, referenced, current, set(live))

    def deactivate(self, build_ids: Sequence[int]) -> int:
        a = s.active_derived_builds
        if not build_ids:
            return 0
        with self._core.tx() as c:
            return c.execute(a.delete().where(a.c.build_id.in_(list(build_ids)))).rowcount

    def mark_lost(self, build_ids: Sequence[int], now: dt.datetime) -> set[int]:
        """Mark these running builds failed; return those it moved (a build that published or failed since
        it was read is left as it is, and must not be deleted)."""
        b = s.derived_builds
        if not build_ids:
            return set()
        with self._core.tx() as c:
            return set(
                c.execute(
                    b.update()
                    .where(b.c.id.in_(list(build_ids)), b.c.status == "building")
                    .values(status="failed", end_time=now, error="builder lost: its process is gone or silent")
                    .returning(b.c.id)
                ).scalars()
            )

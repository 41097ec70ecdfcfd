"""Staging objects: registering them once, the pending, failing and unknown ones, redeliveries, error files.

Their processing (small objects, processed and failed marks) commits through partitions.StreamCommit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, table_record
from siltlake.catalog.records import FailingStagingObject, PendingStagingObject, Redelivery, UnknownObject
from siltlake.clock import utcnow

# URIs looked up per statement: an idle round over a long staging history reads them all, and each statement
# has its own cost. Within the bound parameters of both databases (SQLite 3.32+ takes 32,766, PostgreSQL 65,535).
_URIS_PER_STATEMENT = 5000


class Staging:
    """Reached as catalog.staging."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def known_uris(self, uris: Sequence[str]) -> set[str]:
        """Which of these URIs are already registered, as staging or unknown objects."""
        with self._core.tx() as c:
            return {uri for uri, _, _ in self._registered(c, uris)}

    def _registered(self, c: Connection, uris: Sequence[str]) -> Iterator[tuple[str, dt.datetime | None, int | None]]:
        """(uri, send_time, size) of each of these URIs registered as a staging object, then (uri, None, None) of
        each of the rest registered as an unknown one. Unknown objects are asked for only among the URIs that are
        no staging object: a listing of a processed history, nearly all staging objects, reads each URI once."""
        so, u = s.staging_objects, s.unknown_staging_objects
        for start in range(0, len(uris), _URIS_PER_STATEMENT):
            chunk = list(uris[start:start + _URIS_PER_STATEMENT])
            found = c.execute(sa.select(so.c.uri, so.c.send_time, so.c.size).where(so.c.uri.in_(chunk))).all()
            yield from found
            rest = set(chunk).difference(row.uri for row in found)
            if rest:
                yield from ((uri, None, None) for uri in
                            c.execute(sa.select(u.c.uri).where(u.c.uri.in_(list(rest)))).scalars())

    def register(self, objects: Iterable[tuple[str, int, int, dt.datetime | None]]) -> int:
        """Register (uri, table_id, size, send_time) rows once each; returns how many were new."""
        now = utcnow()
        rows = [dict(uri=uri, table_id=table_id, size=size, send_time=send_time, receive_time=now)
                for uri, table_id, size, send_time in objects]
        with self._core.tx() as c:
            # One statement per 500 objects: a shipper's thousands of small objects register in a few.
            return sum(self._core.insert_once(c, s.staging_objects, "uri", rows[start:start + 500])
                       for start in range(0, len(rows), 500))

    def sort_listed(self, listed: Sequence[tuple[str, dt.datetime | None, int]]) -> tuple[set[str], list[Redelivery]]:
        """Of listed objects (uri, mtime, size): the URIs already registered (as staging or unknown objects), and
        the registered staging objects put again (an mtime newer than their send_time), each put returned once.

        Both come from one read of each URI. The send_time moves to the newest put under a compare-and-set, so of
        several processes listing the same re-put only one returns it, and a later listing of the same put
        returns nothing."""
        so = s.staging_objects
        puts = {uri: (put_time, size) for uri, put_time, size in listed}
        known: set[str] = set()
        newer: list[Redelivery] = []
        with self._core.tx() as c:
            for uri, send_time, registered_size in self._registered(c, list(puts)):
                known.add(uri)
                put_time, put_size = puts[uri]
                if send_time is not None and put_time is not None and put_time > send_time:
                    newer.append(Redelivery(uri, put_time, registered_size, put_size))
            return known, [put for put in newer if c.execute(
                so.update().where(so.c.uri == put.uri, so.c.send_time < put.put_time)
                .values(send_time=put.put_time)).rowcount]

    def record_unknown(self, uri: str, reason: str, *, size: int | None = None,
                       table_id: int | None = None) -> bool:
        with self._core.tx() as c:
            return bool(self._core.insert_once(c, s.unknown_staging_objects, "uri", dict(
                uri=uri, reason=reason, size=size, table_id=table_id, detect_time=utcnow(),
            )))

    def pending(self, limit: int) -> list[PendingStagingObject]:
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(s.staging_objects.c.id, s.staging_objects.c.uri, s.staging_objects.c.size,
                          s.staging_objects.c.table_id)
                .where(s.staging_objects.c.processed_time.is_(None))
                .order_by(s.staging_objects.c.id).limit(limit)
            ).all()
            table_ids = {r.table_id for r in rows}
            tables = {
                t.id: table_record(t)
                for t in c.execute(sa.select(s.tables).where(s.tables.c.id.in_(table_ids)))
            } if table_ids else {}
        return [PendingStagingObject(r.id, r.uri, r.size, tables[r.table_id]) for r in rows]

    def failing(self) -> list[FailingStagingObject]:
        """Pending staging objects whose processing failed at least once, the most failed first."""
        so, t = s.staging_objects, s.tables
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(so.c.uri, t.c.schema_name, t.c.table_name, so.c.failure_count, so.c.last_failure,
                          so.c.last_failure_time)
                .select_from(so.join(t, so.c.table_id == t.c.id))
                .where(so.c.processed_time.is_(None), so.c.failure_count > 0)
                .order_by(so.c.failure_count.desc(), so.c.id)
            ).all()
        return [FailingStagingObject(r.uri, f"{r.schema_name}.{r.table_name}", r.failure_count, r.last_failure,
                                     r.last_failure_time) for r in rows]

    def unknown(self) -> list[UnknownObject]:
        u, t = s.unknown_staging_objects, s.tables
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(u.c.uri, u.c.reason, u.c.size, u.c.detect_time, t.c.schema_name, t.c.table_name)
                .select_from(u.outerjoin(t, u.c.table_id == t.c.id)).order_by(u.c.id)
            ).all()
        return [
            UnknownObject(r.uri, r.reason, r.size, r.detect_time,
                          f"{r.schema_name}.{r.table_name}" if r.schema_name else None)
            for r in rows
        ]

    def forget_unknown(self, uris: Sequence[str] | None = None) -> list[str]:
        """Remove unknown rows (all, or the given URIs) and re-queue their staging rows for a replay."""
        u = s.unknown_staging_objects
        with self._core.tx() as c:
            query = sa.select(u.c.uri)
            if uris is not None:
                query = query.where(u.c.uri.in_(list(uris)))
            forgotten = list(c.execute(query).scalars())
            if forgotten:
                c.execute(u.delete().where(u.c.uri.in_(forgotten)))
                c.execute(s.staging_objects.delete().where(
                    s.staging_objects.c.uri.in_(forgotten),
                    ~sa.exists().where(s.small_objects.c.staging_object_id == s.staging_objects.c.id),
                ))
        return forgotten

    def error_uris(self, table_id: int) -> list[str]:
        so = s.staging_objects
        with self._core.tx() as c:
            return list(c.execute(
                sa.select(so.c.error_uri).where(so.c.table_id == table_id, so.c.error_uri.is_not(None))
                .order_by(so.c.id)
            ).scalars())

    def error_uris_received(self, table_id: int) -> list[tuple[str, dt.datetime]]:
        """(error file URI, when its staging object was registered) of a table, in staging id order."""
        so = s.staging_objects
        with self._core.tx() as c:
            return [(r.error_uri, r.receive_time) for r in c.execute(
                sa.select(so.c.error_uri, so.c.receive_time).where(so.c.table_id == table_id,
                                                                   so.c.error_uri.is_not(None))
                .order_by(so.c.id))]

    def clear_error_uri(self, error_uri: str) -> None:
        with self._core.tx() as c:
            c.execute(s.staging_objects.update().where(s.staging_objects.c.error_uri == error_uri)
                      .values(error_uri=None))

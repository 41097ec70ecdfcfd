"""Staging objects: registering them once, the pending, failing and unknown ones, redeliveries, error files.

Their processing (small objects, processed and failed marks) commits through stream_commit.StreamCommit."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog import schema_discovery as sd
from siltlake.catalog.consumption import note_files
from siltlake.catalog.core import CatalogCore, table_record
from siltlake.catalog.position_rows import unconsumed
from siltlake.catalog.rows import (
    FailingStagingObject,
    LocalHost,
    PendingStagingObject,
    Redelivery,
    UnknownObject,
)
from siltlake.clock import utcnow

# URIs looked up per statement: an idle round over a long staging history reads them all, and each statement
# has its own cost. Within the bound parameters of both databases (SQLite 3.32+ takes 32,766, PostgreSQL 65,535).
_URIS_PER_STATEMENT = 5000
# The two lookups, built once with one expanding parameter: building `uri IN (...)` from a list made a bound
# parameter object per URI (its coercion and the statement's cache key each time): a tenth of a lookup's time.
_REGISTERED = sa.select(s.staging_objects.c.uri, s.staging_objects.c.send_time, s.staging_objects.c.size).where(
    s.staging_objects.c.uri.in_(sa.bindparam("uris", expanding=True))
)
_REGISTERED_UNKNOWN = sa.select(s.unknown_staging_objects.c.uri).where(
    s.unknown_staging_objects.c.uri.in_(sa.bindparam("uris", expanding=True))
)


def staging_sums(rows: Iterable[sa.Row]) -> dict[int, tuple[int, int, int]]:
    """Per table: how many of these staging rows (table_id, records_in, bad_records), their records, bad records."""
    sums: dict[int, list[int]] = {}
    for row in rows:
        total = sums.setdefault(row.table_id, [0, 0, 0])
        total[0] += 1
        total[1] += row.records_in or 0
        total[2] += row.bad_records or 0
    return {
        table_id: (objects, records_in, bad_records) for table_id, (objects, records_in, bad_records) in sums.items()
    }


def prunable(before: dt.datetime, batch: int, after: tuple[dt.datetime, int] | None = None) -> sa.Select:
    """The next `batch` staging rows Staging.prune may delete, in (receive_time, id) order, past `after`'s row.

    The bound on `after` is one range of the receive_time index, then the tie: written as an OR of the two ranges,
    SQLite read and sorted every row left for each batch (a day of a million rows took 68 s to prune, not 9)."""
    so, sm = s.staging_objects, s.small_objects
    referenced = sa.or_(
        sa.exists().where(sm.c.staging_object_id == so.c.id),
        sa.exists().where(s.small_object_sources.c.staging_object_id == so.c.id),
    )
    query = (
        sa.select(so.c.id, so.c.receive_time)
        .where(
            so.c.receive_time < before,
            so.c.processed_time.is_not(None),
            sa.or_(so.c.send_time.is_(None), so.c.send_time < before),
            sa.or_(so.c.claim_time.is_(None), so.c.claim_time < before),
            so.c.error_uri.is_(None),
            ~referenced,
        )
        .order_by(so.c.receive_time, so.c.id)
        .limit(batch)
    )
    if after is None:
        return query
    return query.where(so.c.receive_time >= after[0], sa.or_(so.c.receive_time > after[0], so.c.id > after[1]))


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
        for start in range(0, len(uris), _URIS_PER_STATEMENT):
            chunk = list(uris[start : start + _URIS_PER_STATEMENT])
            found = c.execute(_REGISTERED, {"uris": chunk}).all()
            yield from found
            rest = set(chunk).difference(row.uri for row in found)
            if rest:
                unknown: Iterable[str] = c.execute(_REGISTERED_UNKNOWN, {"uris": list(rest)}).scalars()
                yield from ((uri, None, None) for uri in unknown)

    def register(
        self,
        objects: Iterable[tuple[str, int, int, dt.datetime | None]],
        staging_root: str | None = None,
        notes: Sequence[dict] = (),
    ) -> int:
        """Register (uri, table_id, size, send_time) rows once each; returns how many were new. `notes`: the
        identities of the local files among them (positions.note_files), under `staging_root`."""
        now = utcnow()
        rows = [
            dict(uri=uri, table_id=table_id, size=size, send_time=send_time, receive_time=now)
            for uri, table_id, size, send_time in objects
        ]
        with self._core.tx() as c:
            if notes and staging_root is not None:
                note_files(self._core, c, staging_root, notes, now)
            new = Counter(row.table_id for row in self._core.insert_new(c, s.staging_objects, "uri", rows, "table_id"))
            self._core.add_staging_totals(c, {table_id: (count, 0, 0) for table_id, count in new.items()})
            return sum(new.values())

    def sort_listed(
        self,
        listed: Sequence[tuple[str, dt.datetime | None, int]],
        resized: dict[str, int] | None = None,
        *,
        take: bool = True,
    ) -> tuple[set[str], list[Redelivery]]:
        """Of listed objects (uri, mtime, size): the URIs already registered (as staging or unknown objects), and
        the registered staging objects put again (an mtime newer than their send_time), each put returned once.
        `resized` (when given) gets each registered staging object listed with another size than registered:
        {uri: registered size}, every time (a file appended to; stream/appends.py).

        Both come from one read of each URI. The send_time moves to the newest put under a compare-and-set, so of
        several processes listing the same re-put only one returns it, and a later listing of the same put
        returns nothing. With take=False every put is returned and none is taken: a local file put again at its
        name may be another file, judged first; take_puts then takes those judged (stream/discover.py)."""
        puts = {uri: (put_time, size) for uri, put_time, size in listed}
        known: set[str] = set()
        newer: list[Redelivery] = []
        with self._core.tx() as c:
            for uri, send_time, registered_size in self._registered(c, list(puts)):
                known.add(uri)
                put_time, put_size = puts[uri]
                if resized is not None and registered_size is not None and registered_size != put_size:
                    resized[uri] = registered_size
                # A staging object has both its send time and its size; an unknown object neither.
                if (
                    send_time is not None
                    and registered_size is not None
                    and put_time is not None
                    and put_time > send_time
                ):
                    newer.append(Redelivery(uri, put_time, registered_size, put_size))
            return known, self._take(c, newer) if take else newer

    def take_puts(self, puts: Sequence[Redelivery]) -> list[Redelivery]:
        """Take puts sort_listed(take=False) returned: those no other process took first."""
        if not puts:
            return []
        with self._core.tx() as c:
            return self._take(c, puts)

    @staticmethod
    def _take(c: Connection, puts: Sequence[Redelivery]) -> list[Redelivery]:
        """Move each put's send_time to its put time (compare-and-set): the puts taken here."""
        so = s.staging_objects
        return [
            put
            for put in puts
            if c.execute(
                so.update().where(so.c.uri == put.uri, so.c.send_time < put.put_time).values(send_time=put.put_time)
            ).rowcount
        ]

    def record_unknown(self, uri: str, reason: str, *, size: int | None = None, table_id: int | None = None) -> bool:
        with self._core.tx() as c:
            return bool(
                self._core.insert_once(
                    c,
                    s.unknown_staging_objects,
                    "uri",
                    dict(
                        uri=uri,
                        reason=reason,
                        size=size,
                        table_id=table_id,
                        detect_time=utcnow(),
                    ),
                )
            )

    def pending(
        self,
        limit: int,
        *,
        now: dt.datetime | None = None,
        timeout: float | None = None,
        local: LocalHost | None = None,
    ) -> list[PendingStagingObject]:
        """Unprocessed staging objects in id order; with `timeout`, only those no stream daemon holds (see
        claim): what a round may still take."""
        so = s.staging_objects
        with self._core.tx() as c:
            query = _pending_rows().where(so.c.processed_time.is_(None))
            if timeout is not None:
                query = query.where(self._claimable(c, now or utcnow(), timeout, local))
            rows = c.execute(query.order_by(so.c.id).limit(limit)).all()
            return self._with_tables(c, rows)

    def _with_tables(self, c: Connection, rows: Sequence[sa.Row]) -> list[PendingStagingObject]:
        table_ids = {r.table_id for r in rows}
        tables = (
            {t.id: table_record(t) for t in c.execute(sa.select(s.tables).where(s.tables.c.id.in_(table_ids)))}
            if table_ids
            else {}
        )
        return [
            PendingStagingObject(
                r.id,
                r.uri,
                r.size,
                tables[r.table_id],
                r.failure_count,
                r.noted_identity,
                (r.noted_crc, r.noted_length) if r.noted_crc is not None and r.noted_length else None,
            )
            for r in rows
        ]

    # --- stream claims: the merge queue's owner/heartbeat pattern, per staging object -----------------------

    def _claimable(
        self, c: Connection, now: dt.datetime, timeout: float, local: LocalHost | None
    ) -> sa.ColumnElement[bool]:
        """Unclaimed, or claimed by a daemon silent for `timeout` seconds, or (with `local`) by a process of this
        host that is gone: a SIGKILLed daemon's share is taken over at once on its own host, after the timeout
        on the others (another host's pids mean nothing here)."""
        so = s.staging_objects
        stale_before = now - dt.timedelta(seconds=timeout)
        gone: list[int] = []
        if local is not None:
            # Only pending objects with a fresh claim: a few waves' worth, however long the backlog.
            held = c.execute(
                sa.select(so.c.id, so.c.claim_host.label("owner_host"), so.c.claim_pid.label("owner_pid")).where(
                    so.c.processed_time.is_(None), so.c.claim_owner.is_not(None), so.c.claim_time >= stale_before
                )
            ).all()
            gone = [row.id for row in local.dead_claims(held)]
        return sa.or_(
            so.c.claim_owner.is_(None), so.c.claim_time < stale_before, *([so.c.id.in_(gone)] if gone else [])
        )

    def claim(
        self, owner: str, *, limit: int, now: dt.datetime, timeout: float, local: LocalHost | None = None
    ) -> list[PendingStagingObject]:
        """Claim up to `limit` pending objects no live daemon holds, oldest first; they are this owner's to
        decode until it releases them or goes silent for `timeout` seconds.

        On PostgreSQL FOR UPDATE SKIP LOCKED gives daemons claiming at once disjoint sets (a row another claim
        holds is skipped, and once that claim commits it is fresh); on SQLite every transaction takes the
        write lock up front, which serialises claims."""
        so = s.staging_objects
        with self._core.tx() as c:
            query = (
                sa.select(so.c.id)
                .where(so.c.processed_time.is_(None), self._claimable(c, now, timeout, local))
                .order_by(so.c.id)
                .limit(limit)
            )
            if self._core.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            ids: list[int] = list(c.execute(query).scalars())
            if not ids:
                return []
            c.execute(
                so.update()
                .where(so.c.id.in_(ids))
                .values(
                    claim_owner=owner,
                    claim_time=now,
                    claim_host=local.name if local else None,
                    claim_pid=local.pid if local else None,
                )
            )
            rows = c.execute(_pending_rows().where(so.c.id.in_(ids)).order_by(so.c.id)).all()
            return self._with_tables(c, rows)

    def heartbeat(self, owner: str, ids: Collection[int], now: dt.datetime) -> int:
        """Refresh this owner's claims of these objects (those still pending); how many it still holds."""
        so = s.staging_objects
        ordered, held = sorted(ids), 0
        with self._core.tx() as c:
            for start in range(0, len(ordered), _URIS_PER_STATEMENT):
                held += c.execute(
                    so.update()
                    .where(
                        so.c.id.in_(ordered[start : start + _URIS_PER_STATEMENT]),
                        so.c.claim_owner == owner,
                        so.c.processed_time.is_(None),
                    )
                    .values(claim_time=now)
                ).rowcount
        return held

    def release(self, owner: str, ids: Collection[int] | None = None) -> int:
        """Give back this owner's claims (of these objects, or all its pending ones): they are anyone's to
        take at once, not after the timeout. Processed objects keep theirs: nothing takes a processed one."""
        so = s.staging_objects
        where = [so.c.claim_owner == owner, so.c.processed_time.is_(None)]
        clear = dict(claim_owner=None, claim_host=None, claim_pid=None, claim_time=None)
        with self._core.tx() as c:
            if ids is None:
                return c.execute(so.update().where(*where).values(**clear)).rowcount
            ordered, released = sorted(ids), 0
            for start in range(0, len(ordered), _URIS_PER_STATEMENT):
                released += c.execute(
                    so.update().where(so.c.id.in_(ordered[start : start + _URIS_PER_STATEMENT]), *where).values(**clear)
                ).rowcount
            return released

    def failing(self) -> list[FailingStagingObject]:
        """Pending staging objects whose processing failed at least once, the most failed first."""
        so, t = s.staging_objects, s.tables
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(
                    so.c.uri,
                    t.c.schema_name,
                    t.c.table_name,
                    so.c.failure_count,
                    so.c.last_failure,
                    so.c.last_failure_time,
                )
                .select_from(so.join(t, so.c.table_id == t.c.id))
                .where(so.c.processed_time.is_(None), so.c.failure_count > 0)
                .order_by(so.c.failure_count.desc(), so.c.id)
            ).all()
        return [
            FailingStagingObject(
                r.uri, f"{r.schema_name}.{r.table_name}", r.failure_count, r.last_failure, r.last_failure_time
            )
            for r in rows
        ]

    def unknown(self) -> list[UnknownObject]:
        u, t = s.unknown_staging_objects, s.tables
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(u.c.uri, u.c.reason, u.c.size, u.c.detect_time, t.c.schema_name, t.c.table_name)
                .select_from(u.outerjoin(t, u.c.table_id == t.c.id))
                .order_by(u.c.id)
            ).all()
        return [
            UnknownObject(
                r.uri, r.reason, r.size, r.detect_time, f"{r.schema_name}.{r.table_name}" if r.schema_name else None
            )
            for r in rows
        ]

    def forget_unknown(self, uris: Sequence[str] | None = None) -> list[str]:
        """Remove unknown rows (all, or the given URIs) and re-queue their staging rows for a replay."""
        u = s.unknown_staging_objects
        with self._core.tx() as c:
            query = sa.select(u.c.uri)
            if uris is not None:
                query = query.where(u.c.uri.in_(list(uris)))
            forgotten: list[str] = list(c.execute(query).scalars())
            if forgotten:
                c.execute(u.delete().where(u.c.uri.in_(forgotten)))
                so = s.staging_objects
                gone = c.execute(
                    so.delete()
                    .where(
                        so.c.uri.in_(forgotten),
                        ~sa.exists().where(s.small_objects.c.staging_object_id == so.c.id),
                        ~sa.exists().where(s.small_object_sources.c.staging_object_id == so.c.id),
                    )
                    .returning(so.c.table_id, so.c.records_in, so.c.bad_records)
                ).all()
                # What was noted of their files goes too: a replay reads the file at the name now (put again,
                # fixed), which its first delivery would otherwise refuse as another file.
                p = sd.staging_positions
                c.execute(
                    p.update()
                    .where(p.c.uri.in_(forgotten), unconsumed())
                    .values(file_identity=None, head_crc=None, head_length=None)
                )
                # Registered again by the replay, and counted again then.
                self._core.add_staging_totals(
                    c, {table_id: tuple(-n for n in sums) for table_id, sums in staging_sums(gone).items()}
                )
        return forgotten

    def error_uris(self, table_id: int) -> list[str]:
        so = s.staging_objects
        with self._core.tx() as c:
            return list(
                c.execute(
                    sa.select(so.c.error_uri)
                    .where(so.c.table_id == table_id, so.c.error_uri.is_not(None))
                    .order_by(so.c.id)
                ).scalars()
            )

    def error_uris_received(self, table_id: int) -> list[tuple[str, dt.datetime]]:
        """(error file URI, when its staging object was registered) of a table, in staging id order."""
        so = s.staging_objects
        with self._core.tx() as c:
            return [
                (r.error_uri, r.receive_time)
                for r in c.execute(
                    sa.select(so.c.error_uri, so.c.receive_time)
                    .where(so.c.table_id == table_id, so.c.error_uri.is_not(None))
                    .order_by(so.c.id)
                )
            ]

    def clear_error_uri(self, error_uri: str) -> None:
        with self._core.tx() as c:
            c.execute(
                s.staging_objects.update().where(s.staging_objects.c.error_uri == error_uri).values(error_uri=None)
            )

    def prune(self, before: dt.datetime, *, batch: int = 5000) -> int:
        """Delete the processed staging rows that arrived before `before` (registered, and last put, before it)
        and that nothing still needs; how many. The caller makes sure listings skip those URIs first (their
        root's expiry watermark, catalog.discovery), else they would be registered and loaded again.

        Kept: pending rows (failing ones are pending too), rows claimed since, rows with an error file (reap
        deletes an error file no staging row names) and rows a small object still names (its foreign key; the
        small object goes once merges cover it, then the row). What they counted stays in staging_totals."""
        so = s.staging_objects
        pruned = 0
        after: tuple[dt.datetime, int] | None = None
        while True:
            # One transaction per batch: a long history is pruned without one huge transaction holding locks. Each
            # batch starts past the last one's rows, so the rows kept (still referenced) are not read again.
            query = prunable(before, batch, after)
            with self._core.tx() as c:
                selected = c.execute(query).all()
                ids = [row.id for row in selected]
                if selected:
                    after = (selected[-1].receive_time, selected[-1].id)
                pruned += c.execute(so.delete().where(so.c.id.in_(ids))).rowcount if ids else 0
            if len(ids) < batch:
                if pruned:
                    self._core.vacuum_unattended(so)
                return pruned


def _pending_rows() -> sa.Select:
    """A pending object's columns, with what was noted of its file when its name was registered (a position no
    delivery consumed yet: the name's first delivery)."""
    so, p = s.staging_objects, sd.staging_positions
    noted = sa.and_(p.c.uri == so.c.uri, unconsumed())
    return sa.select(
        so.c.id,
        so.c.uri,
        so.c.size,
        so.c.table_id,
        so.c.failure_count,
        p.c.file_identity.label("noted_identity"),
        p.c.head_crc.label("noted_crc"),
        p.c.head_length.label("noted_length"),
    ).select_from(so.outerjoin(p, noted))

"""Request ids of committed writes (docs/design.md "Request ids and restore"): the operation log a retried write
reads to learn that it was applied already. A write records its id in the transaction that commits it, so a crash
before the commit leaves no id and the retry applies the write; a crash after it leaves the id, and the retry
changes nothing."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.rows import AppliedRequest, RequestApplied, WriteRequest


def record_applied(
    core: CatalogCore, c: Connection, request: WriteRequest, table_version: int | None, detail: str, now: dt.datetime
) -> None:
    """Record the request in transaction c, the one that commits its write; RequestApplied (which rolls the
    transaction back) when another commit recorded the same id first."""
    if not core.insert_once(
        c,
        s.applied_requests,
        ("table_id", "request_id"),
        dict(
            table_id=request.table_id,
            request_id=request.request_id,
            operation=request.operation,
            table_version=table_version,
            detail=detail,
            created_at=now,
        ),
    ):
        raise RequestApplied(
            f"request id {request.request_id!r} was committed by another {request.operation} "
            "while this one ran; this one changed nothing"
        )


def check_not_applied(c: Connection, request: WriteRequest) -> None:
    """RequestApplied if the request's id is recorded already: run first in a commit holding the ordering lock, so
    that a second attempt of one request is told so rather than failing on the first's changes as a conflict."""
    r = s.applied_requests
    if (
        c.execute(
            sa.select(r.c.id).where(r.c.table_id == request.table_id, r.c.request_id == request.request_id)
        ).first()
        is not None
    ):
        raise RequestApplied(
            f"request id {request.request_id!r} was committed by another {request.operation} "
            "while this one ran; this one changed nothing"
        )


class Requests:
    """Reached as catalog.requests."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def get(self, table_id: int, request_id: str) -> AppliedRequest | None:
        """The applied request of this id on the table, None if there is none (never applied, or pruned)."""
        r = s.applied_requests
        with self._core.tx() as c:
            row = c.execute(sa.select(r).where(r.c.table_id == table_id, r.c.request_id == request_id)).first()
        if row is None:
            return None
        return AppliedRequest(
            table_id=row.table_id,
            request_id=row.request_id,
            operation=row.operation,
            table_version=row.table_version,
            detail=row.detail,
            created_at=row.created_at,
        )

    def record(self, request: WriteRequest, table_version: int | None, detail: str, now: dt.datetime) -> None:
        """Record a request whose write committed nothing (nothing matched) in a transaction of its own."""
        with self._core.tx() as c:
            record_applied(self._core, c, request, table_version, detail, now)

    def prune(self, before: dt.datetime) -> int:
        """Forget the request ids recorded before `before`; how many went."""
        r = s.applied_requests
        with self._core.tx() as c:
            return c.execute(r.delete().where(r.c.created_at < before)).rowcount

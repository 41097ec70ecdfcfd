"""Request ids of writes (docs/design.md "Request ids and restore"): a write given one is applied exactly once.

The catalog records the id in the transaction that commits the write (catalog.requests). A write first looks its
id up: found, it changes nothing and its report says what the first attempt did; not found, it runs, and should
another attempt with the same id commit first, its own commit is refused (RequestApplied) and it reports the same.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from siltlake.catalog import AppliedRequest, TableRecord, WriteRequest
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.write.update import PreparedUpdates, UpdateReport

MAX_REQUEST_ID = 200  # characters (the catalog column's width)


def write_request(record: TableRecord, request_id: str | None, operation: str) -> WriteRequest | None:
    """The write's request, None without an id; a SiltError naming what is wrong with a malformed id."""
    if request_id is None:
        return None
    if (
        not isinstance(request_id, str)
        or not request_id.strip()
        or len(request_id) > MAX_REQUEST_ID
        or not request_id.isprintable()
    ):
        raise SiltError(
            f"{operation} into {record.qualified_name}: the request id {request_id!r} must be printable "
            f"text of 1 to {MAX_REQUEST_ID} characters (e.g. a UUID); nothing was changed"
        )
    return WriteRequest(record.id, request_id, operation)


def applied_before(deployment: Deployment, request: WriteRequest | None) -> AppliedRequest | None:
    """The committed write of the request's id, None if there is none. An id committed by another kind of write
    is refused: an id names one write, and a retry repeats it."""
    if request is None:
        return None
    found = deployment.catalog.requests.get(request.table_id, request.request_id)
    if found is not None and found.operation != request.operation:
        raise SiltError(
            f"request id {request.request_id!r} was used by a {found.operation} at "
            f"{found.created_at.isoformat(sep=' ', timespec='seconds')} UTC; a request id names one "
            f"write: give this {request.operation} an id of its own; nothing was changed"
        )
    return found


def already_applied(applied: AppliedRequest) -> str:
    """A retried write's message: what its first attempt did."""
    version = f", table version {applied.table_version}" if applied.table_version is not None else ""
    return (
        f"request id {applied.request_id!r} was applied already ({applied.operation} at "
        f"{applied.created_at.isoformat(sep=' ', timespec='seconds')} UTC{version}: {applied.detail}); "
        "nothing was changed"
    )


def record_unchanged(
    deployment: Deployment, request: WriteRequest | None, detail: str, now: dt.datetime | None
) -> None:
    """Record a request whose write committed nothing (nothing matched): a retry changes nothing either."""
    if request is not None:
        deployment.catalog.requests.record(request, None, detail, now or utcnow())


@dataclass(frozen=True)
class UpdatesReport(Sequence[UpdateReport]):
    """What a delete, update or restore did: a report per partition (iterate it), the request id and, for a
    retry whose id was applied already, that first commit (`applied_before`; then nothing was changed)."""

    table: str
    partitions: tuple[UpdateReport, ...]
    request_id: str | None = None
    applied_before: AppliedRequest | None = None
    rows_changed: tuple[int, ...] = field(default=())  # per partition: rows deleted or set (default: before - after)

    def __getitem__(self, index):  # Sequence's
        return self.partitions[index]

    def __len__(self) -> int:
        return len(self.partitions)

    def __iter__(self) -> Iterator[UpdateReport]:
        return iter(self.partitions)

    @property
    def table_version(self) -> int | None:
        """The table version the write published (None: it changed nothing)."""
        versions = {p.version.table_version for p in self.partitions if p.version is not None}
        return versions.pop() if versions else None

    def changed(self) -> list[int]:
        """The rows each partition's write deleted or set (or, in a dry run, would)."""
        return list(self.rows_changed) or [p.rows_before - p.rows_after for p in self.partitions]

    @property
    def message(self) -> str | None:
        """What a retry was told, None for a write that ran."""
        return already_applied(self.applied_before) if self.applied_before is not None else None

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "request_id": self.request_id,
            "table_version": self.table_version,
            "applied_before": None
            if self.applied_before is None
            else {
                "operation": self.applied_before.operation,
                "table_version": self.applied_before.table_version,
                "detail": self.applied_before.detail,
                "created_at": self.applied_before.created_at.isoformat(),
            },
            "partitions": [
                {
                    "dt": p.partition_date.isoformat(),
                    "rows_before": p.rows_before,
                    "rows_after": p.rows_after,
                    "rows_changed": changed,
                    "version": p.version.version if p.version is not None else None,
                    "object": p.object_key,
                }
                for p, changed in zip(self.partitions, self.changed(), strict=True)
            ],
        }


def commit_updates(
    deployment: Deployment, record: TableRecord, prepared: PreparedUpdates, request: WriteRequest | None, detail: str
) -> UpdatesReport:
    """Commit prepared partition rewrites as one table version with the request id, or (nothing changed) record
    the id alone; a concurrent attempt with the same id that committed first makes this one a no-op."""
    from siltlake.catalog import RequestApplied

    name = record.qualified_name
    rewritten = any(u.object_key is not None for u in prepared.updates)
    try:
        if not rewritten:
            record_unchanged(deployment, request, detail, prepared.now)
        reports = prepared.commit((request, detail) if request is not None and rewritten else None)
    except RequestApplied:
        assert request is not None
        return UpdatesReport(name, (), request.request_id, applied_before(deployment, request))
    return UpdatesReport(name, tuple(reports), request.request_id if request is not None else None)

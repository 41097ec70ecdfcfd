"""An Iceberg snapshot follows its table version at once (docs/design.md, "Iceberg target"): a write that commits
table versions outside a publish run (an upsert; an update, delete, overwrite or restore) commits their snapshots
right after its own catalog commit, as a publish run does for the versions it makes, so engines see a version when
siltlake does.

The order is siltlake's catalog first, then Iceberg. Its catalog is what every siltlake reader and writer decides
by; the Iceberg table only mirrors it, each snapshot carrying the version it holds (`siltlake.table-version`) and
that version's time. A crash between the two leaves Iceberg one step behind, showing the previous version exactly;
the next follow or publish run commits the missing versions from the current snapshot's version on, each once, with
their own times, so time travel by time agrees again at every instant. The other order would let engines see a
version siltlake never committed (a write refused or killed before its catalog commit).

A follow that fails (the Iceberg catalog down) does not fail the write, which is committed: it is logged, and the
next publish run catches up. Tags follow the same way (follow_tags): siltlake's catalog first, then the Iceberg tag.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from siltlake.logs import event

if TYPE_CHECKING:
    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment

log = logging.getLogger(__name__)


def follow(deployment: Deployment, record: TableRecord) -> str | None:
    """Commit the Iceberg snapshots of the table's versions Iceberg does not have yet (nothing unless
    publish.targets names iceberg); returns why that failed, None when it did not."""
    if "iceberg" not in deployment.config.publish.targets:
        return None
    from siltlake.publish.iceberg.target import IcebergTarget

    try:
        IcebergTarget(deployment).follow(deployment.catalog.tables.get(record.qualified_name))
    except Exception as exc:  # the write is committed: the next publish run follows instead
        event(log, "iceberg.follow_failed", logging.WARNING, table=record.qualified_name, reason=str(exc))
        return str(exc)
    return None


def follow_tags(deployment: Deployment, record: TableRecord, removed: Mapping[str, int] | None = None) -> str | None:
    """Make the Iceberg tags match siltlake's tags of the table, right after one was made, moved or (`removed`: name
    -> the version it named) forgotten; returns why that failed, None when it did not. A table not in Iceberg yet
    gets its tags with its snapshots, at the next publish run."""
    if "iceberg" not in deployment.config.publish.targets:
        return None
    from siltlake.publish.iceberg.catalog import identifier, retried_on_conflict
    from siltlake.publish.iceberg.target import IcebergTarget

    target = IcebergTarget(deployment)
    try:
        table = target.load(identifier(deployment, record))
        if table is not None and target.owned(table, record.id):
            retried_on_conflict(record.qualified_name, lambda: target.sync_tags(record, table, removed), table.refresh)
    except Exception as exc:  # the tag is committed: the next version's snapshot brings the Iceberg tag with it
        event(log, "iceberg.follow_failed", logging.WARNING, table=record.qualified_name, reason=str(exc))
        return str(exc)
    return None

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
next publish run catches up.
"""

from __future__ import annotations

import logging
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
    from siltlake.publish.iceberg import IcebergTarget

    try:
        IcebergTarget(deployment).follow(deployment.catalog.tables.get(record.qualified_name))
    except Exception as exc:  # the write is committed: the next publish run follows instead
        event(log, "iceberg.follow_failed", logging.WARNING, table=record.qualified_name, reason=str(exc))
        return str(exc)
    return None

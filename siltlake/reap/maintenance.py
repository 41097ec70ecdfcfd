"""Table.maintenance: compacting one table now and expiring (reaping) what only its expired versions need."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING, Any

from siltlake.catalog import TableRecord
from siltlake.deployment import Deployment
from siltlake.errors import NoSuchPartition

if TYPE_CHECKING:
    from siltlake.merge import MergeReport
    from siltlake.publish import PublishReport
    from siltlake.reap.report import ReapReport


@dataclasses.dataclass(frozen=True)
class CompactReport:
    """What compact did: the merge run's report and the publish run's (None: not asked for, or a dry run); a dry
    run's `planned`, the merge jobs it would run (inspect.merge_jobs' columns), changing nothing."""

    merge: MergeReport | None
    publish: PublishReport | None
    planned: Any = None  # a pyarrow Table, for a dry run


class TableMaintenance:
    """One table's upkeep, as delta-rs's `optimize`/`vacuum` and PyIceberg's `maintenance` group it."""

    def __init__(self, deployment: Deployment, record: TableRecord) -> None:
        self.deployment = deployment
        self.record = record

    def compact(
        self, dates: Any = None, now: dt.datetime | None = None, publish: bool = True, dry_run: bool = False
    ) -> CompactReport:
        """Merge the table's small objects now (of the partitions `dates`; None: all), as `silt merge --once
        --now` does for it, then (publish) run a publish, which shows closed days' merged objects as a
        `compaction` version; a day still open keeps showing its live objects until it closes. `now` (naive
        UTC) replaces the clock. Runs on the deployment's Spark (small jobs run in process). dry_run: the merge
        jobs it would run, in `planned`; nothing is merged or published."""
        from siltlake.clock import utcnow
        from siltlake.merge import MergeWorker
        from siltlake.publish import publish_once
        from siltlake.read.version_files import parse_dates

        deployment = self.deployment
        partition_ids = None
        if dates is not None:
            wanted = parse_dates(dates) or set()
            present: dict[dt.date, list[int]] = {}  # a table partitioned below dt: several partitions a date
            for p in deployment.catalog.partitions.list(self.record.id):
                present.setdefault(p.partition_date, []).append(p.id)
            missing = sorted(wanted - set(present))
            if missing:
                raise NoSuchPartition(
                    f"{self.record.qualified_name} has no partition {', '.join(d.isoformat() for d in missing)}"
                )
            partition_ids = [pid for day in sorted(wanted) for pid in present[day]]
        clock = (lambda: now) if now is not None else utcnow
        if dry_run:
            import pyarrow as pa
            import pyarrow.compute as pc

            from siltlake.read.inspect import TableInspect

            jobs = TableInspect(deployment, self.record).merge_jobs(clock())
            if dates is not None:
                chosen = pa.array(sorted(parse_dates(dates) or ()), pa.date32())
                jobs = jobs.filter(pc.is_in(jobs.column("dt"), value_set=chosen))
            return CompactReport(None, None, jobs)
        deployment.catalog.merge_queue.advance(clock(), [self.record.id], partition_ids)
        merged = MergeWorker(deployment, table_ids=[self.record.id], partition_ids=partition_ids, clock=clock).run(
            once=True
        )
        return CompactReport(merged, publish_once(deployment, now) if publish else None)

    def expire(self, dry_run: bool = False, now: dt.datetime | None = None, **options: Any) -> ReapReport:
        """Delete what none of this table's retained (or tagged) versions, merge ranges or writers in flight
        needs: `silt reap` over this table's partitions only (retention=, grace= seconds, force=, as reap_once).
        Other tables, temporaries and the catalog's own pruning are left to the lake's reap, and the run is not
        one an incremental `silt reap` starts from. dry_run lists without deleting."""
        from siltlake.reap.runner import reap_once

        return reap_once(self.deployment, now, dry_run=dry_run, table_id=self.record.id, **options)

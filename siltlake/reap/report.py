"""What a reap run did: objects and catalog rows by reason, what it kept and why, its timings."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from siltlake.derived.reap import DerivedReapReport

# (reason, what the report calls it, what its catalog rows are)
REASONS = (
    ("covered", "small objects in the current manifest", "small objects"),
    ("superseded", "superseded merged objects", ""),
    ("expired", "expired versions' manifests", "versions"),
    ("orphan", "orphans past the grace period", ""),
    ("ttl", "partitions past their TTL", "partitions"),
    ("dropped", "dropped tables", "tables"),
)


@dataclass
class ReasonTotals:
    objects: int = 0
    bytes: int = 0
    rows: int = 0  # catalog rows of the reason's kind (see REASONS)


@dataclass
class ReapReport:
    instance_key: str
    now: dt.datetime
    dry_run: bool
    reasons: dict[str, ReasonTotals] = field(default_factory=lambda: {r[0]: ReasonTotals() for r in REASONS})
    kept_young: int = 0  # unreferenced objects still inside the grace period
    kept_running: int = 0  # unreferenced merged objects of a partition a live merge job works on
    kept_unreadable: int = 0  # merged objects kept because a retained manifest could not be read
    failed: list[tuple[str, str]] = field(default_factory=list)  # (key, error): retried by the next run
    warnings: list[str] = field(default_factory=list)
    other_instances: list[str] = field(default_factory=list)
    derived: DerivedReapReport = field(default_factory=DerivedReapReport)  # derived table builds
    listed: int = 0
    staging_rows: int = 0  # processed staging rows pruned past stream.staging_retention (reap.staging_rows)
    request_ids: int = 0  # request ids of committed writes pruned past reap.request_id_retention
    full_sweep: bool = True  # False: listed only what changed since the last run
    prefixes_listed: int = 1
    catalog_seconds: float = 0.0
    list_seconds: float = 0.0
    delete_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def objects(self) -> int:
        return sum(r.objects for r in self.reasons.values())

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.reasons.values())

    def as_dict(self) -> dict:
        return {
            "instance_key": self.instance_key,
            "now": self.now.isoformat(),
            "dry_run": self.dry_run,
            "reasons": {
                name: {"objects": t.objects, "bytes": t.bytes, "catalog_rows": t.rows}
                for name, t in self.reasons.items()
            },
            "objects": self.objects,
            "bytes": self.bytes,
            "kept_young": self.kept_young,
            "kept_running": self.kept_running,
            "kept_unreadable": self.kept_unreadable,
            "failed": [{"key": k, "error": e} for k, e in self.failed],
            "warnings": self.warnings,
            "other_instances": self.other_instances,
            "derived": self.derived.as_dict(),
            "listed": self.listed,
            "staging_rows_pruned": self.staging_rows,
            "request_ids_pruned": self.request_ids,
            "full_sweep": self.full_sweep,
            "prefixes_listed": self.prefixes_listed,
            "catalog_seconds": round(self.catalog_seconds, 3),
            "list_seconds": round(self.list_seconds, 3),
            "delete_seconds": round(self.delete_seconds, 3),
            "seconds": round(self.seconds, 3),
        }

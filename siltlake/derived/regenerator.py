"""The regenerator: which derived tables are stale, and building them, sources first (docs/design.md)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from siltlake.catalog import DerivedRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.derived.build import BuildReport, build_derived, trigger_value_of
from siltlake.errors import SiltError


@dataclass(frozen=True)
class Staleness:
    record: DerivedRecord
    reason: str | None  # None: fresh
    trigger_value: str | None = None  # trigger_sql's value, when it was evaluated


@dataclass
class RegenerateReport:
    checked: int = 0
    built: list[BuildReport] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (table, error)
    waiting: list[tuple[str, str]] = field(default_factory=list)  # (table, why it was not built)


def in_dependency_order(records: list[DerivedRecord]) -> list[DerivedRecord]:
    """Derived tables with each one after the derived tables it reads (definitions have no cycles)."""
    by_table = {record.table.id: record for record in records}
    ordered: list[DerivedRecord] = []
    placed: set[int] = set()

    def place(record: DerivedRecord) -> None:
        if record.id in placed:
            return
        placed.add(record.id)
        for source in record.source_ids:
            if source in by_table:
                place(by_table[source])
        ordered.append(record)

    for record in records:
        place(record)
    return ordered


def staleness(deployment: Deployment, record: DerivedRecord, now: dt.datetime) -> Staleness:
    """Whether (and why) the table needs a build now, by its rule."""
    catalog = deployment.catalog
    last = catalog.derived.last_published(record.id)
    if last is None:
        return Staleness(record, "never built")
    definition = record.definition
    if definition.rule == "persist_for":
        assert definition.persist_for is not None and last.end_time is not None
        age = (now - last.end_time).total_seconds()
        return Staleness(
            record,
            f"built {age:.0f} s ago, persist_for {definition.persist_for} s" if age >= definition.persist_for else None,
        )
    if definition.rule == "sql":
        value = trigger_value_of(deployment, record)
        changed = value != last.trigger_value
        return Staleness(record, f"trigger_sql value {last.trigger_value} -> {value}" if changed else None, value)
    recorded = last.source_state or {}
    for table_id in record.source_ids:
        _, newest = catalog.version_reads.table_bounds(table_id)
        before = recorded.get(str(table_id), {}).get("version")
        if before != newest:
            name = next((t.qualified_name for t in catalog.tables.list() if t.id == table_id), str(table_id))
            return Staleness(record, f"{name} is at version {newest}, the build read {before}")
    return Staleness(record, None)


def regenerate(
    deployment: Deployment, now: dt.datetime | None = None, *, names: list[str] | None = None, dry_run: bool = False
) -> RegenerateReport:
    """Build every stale derived table (or only `names`), each after the derived tables it reads; a table
    whose source failed to build waits for the next run."""
    now = now or utcnow()
    report = RegenerateReport()
    records = deployment.catalog.derived.list()
    if names is not None:
        unknown = sorted(set(names) - {r.qualified_name for r in records})
        if unknown:
            raise SiltError(f"no derived table {', '.join(unknown)}; `silt derived list` shows them")
    failed_tables: set[int] = set()
    for record in in_dependency_order(records):
        if names is not None and record.qualified_name not in names:
            continue
        report.checked += 1
        blocked = [t for t in record.source_ids if t in failed_tables]
        if blocked:
            report.waiting.append((record.qualified_name, "a derived table it reads failed to build"))
            failed_tables.add(record.table.id)
            continue
        try:
            state = staleness(deployment, record, now)
            if state.reason is None:
                continue
            if dry_run:
                report.waiting.append((record.qualified_name, state.reason))
                continue
            report.built.append(
                build_derived(deployment, record.qualified_name, trigger_value=state.trigger_value, now=now)
            )
        except Exception as exc:  # one table's failure (its query, a running build) leaves the others to build
            report.failed.append((record.qualified_name, f"{type(exc).__name__}: {exc}"))
            failed_tables.add(record.table.id)
    return report

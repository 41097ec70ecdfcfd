"""`silt derived ...`: tables defined by a Spark SQL query over other tables, built and kept fresh (docs/design.md)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from siltlake.cli.context import confirm, deployment_of, friendly, needs_spark
from siltlake.cli.options import dry_run_option, format_option, json_option, yes_option
from siltlake.cli.output import (
    Column,
    activity,
    console,
    emit,
    format_count,
    format_size,
    grid,
    out,
    report,
    shown,
    write_json,
)

if TYPE_CHECKING:
    from siltlake.catalog import BuildRecord, DerivedRecord
    from siltlake.deployment import Deployment
    from siltlake.derived import BuildReport, RegenerateReport


@click.group("derived")
def derived_group() -> None:
    """Derived tables: a Spark SQL query over tables, built into a table and rebuilt when it goes stale."""


def _time(value: Any) -> str:
    return value.isoformat(sep=" ", timespec="seconds") if value is not None else "-"


def rule_of(record: DerivedRecord) -> str:
    """The rule that keeps the table fresh, as the definition file says it."""
    from siltlake.defbase import format_duration

    definition = record.definition
    if definition.persist_for is not None:  # the persist_for rule: the one that sets it
        return f"persist_for {format_duration(definition.persist_for)}"
    if definition.rule == "sql":
        return f"trigger_sql {definition.trigger_sql}"
    return "trigger sources"


def _sources(deployment: Deployment, record: DerivedRecord) -> list[str]:
    names = {table.id: table.qualified_name for table in deployment.catalog.tables.list()}
    return [names.get(table_id, f"(dropped table {table_id})") for table_id in record.source_ids]


def _table_rows(deployment: Deployment, record: DerivedRecord) -> int:
    """Rows the derived table shows now: its partitions' newest versions."""
    catalog = deployment.catalog
    newest: dict[int, tuple[int, int]] = {}
    partitions = [p.id for p in catalog.partitions.list(record.table.id)]
    for version in catalog.versions.of_partitions(partitions):
        if version.version > newest.get(version.partition_id, (0, 0))[0]:
            newest[version.partition_id] = (version.version, version.row_count)
    return sum(rows for _, rows in newest.values())


@derived_group.command("create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@json_option
@click.pass_context
@friendly
def derived_create(context: click.Context, file: str, as_json: bool) -> None:
    """Create a derived table from a definition file (TOML, or YAML); `silt derived build` builds it."""
    from siltlake.derived import create_derived
    from siltlake.derivedef import load_derived_file

    definition = load_derived_file(file)
    deployment = deployment_of(context)
    with activity(f"analysing the query of {definition.name}…"):
        record = create_derived(deployment, definition)
    columns = ", ".join(["dt date", *(f"{c.name} {c.type}" for c in record.table.definition.columns)])
    sources = _sources(deployment, record)
    report(
        as_json,
        {
            "action": "create",
            "table": record.qualified_name,
            "rule": rule_of(record),
            "incremental": record.definition.incremental,
            "sources": sources,
            "columns": [
                {"name": "dt", "type": "date"},
                *({"name": c.name, "type": c.type} for c in record.table.definition.columns),
            ],
        },
        f"created derived table {record.qualified_name} ({rule_of(record)}"
        f"{', incremental' if record.definition.incremental else ''}); columns: {columns}; sources: "
        f"{', '.join(sources)}. Build it with `silt derived build {record.qualified_name}`",
    )


LIST_COLUMNS = (
    Column("table"),
    Column("rule"),
    Column("incremental", show=lambda v: "yes" if v else "no"),
    Column("sources"),
    Column("last_build", "last build (UTC)"),
    Column("rows", show=lambda v: format_count(v) if v is not None else "-", right=True),
    Column("state"),
)


def _state(deployment: Deployment, record: DerivedRecord, now: Any) -> str:
    from siltlake.derived import staleness

    try:
        return staleness(deployment, record, now).reason or "fresh"
    except Exception as exc:  # a trigger_sql that fails now, a dropped source: say so in the row
        return f"unknown: {type(exc).__name__}: {exc}"


@derived_group.command("list")
@format_option
@click.pass_context
@friendly
def derived_list(context: click.Context, fmt: str) -> None:
    """List derived tables: rule, sources, last build, rows, and why each is stale (or "fresh").

    A table kept by trigger_sql runs its trigger query to say whether it is stale (this starts Spark)."""
    from siltlake.clock import utcnow

    deployment = deployment_of(context)
    catalog = deployment.catalog
    now = utcnow()
    rows = []
    for record in catalog.derived.list():
        last = catalog.derived.last_published(record.id)
        rows.append(
            {
                "table": record.qualified_name,
                "rule": rule_of(record),
                "incremental": record.definition.incremental,
                "sources": ", ".join(_sources(deployment, record)),
                "last_build": _time(last.end_time) if last else None,
                "rows": _table_rows(deployment, record) if last else None,
                "state": _state(deployment, record, now),
            }
        )
    emit(fmt, LIST_COLUMNS, rows, empty="no derived tables yet; create one with `silt derived create FILE`")


BUILD_COLUMNS = (
    Column("build"),
    Column("kind"),
    Column("status"),
    Column("started", "started (UTC)"),
    Column("seconds", right=True),
    Column("dates", right=True),
    Column("rows", show=format_count, right=True),
    Column("bytes", "size", format_size, right=True),
    Column("error"),
)


def _build_row(build: BuildRecord) -> dict[str, Any]:
    seconds = (build.end_time - build.start_time).total_seconds() if build.end_time else None
    return {
        "build": build.name,
        "kind": build.kind,
        "status": build.status,
        "started": _time(build.start_time),
        "seconds": f"{seconds:.1f}" if seconds is not None else "-",
        "dates": build.dates_written,
        "rows": build.rows_written,
        "bytes": build.bytes_written,
        "error": build.error or "",
    }


@derived_group.command("show")
@click.argument("name")
@click.option(
    "--builds",
    "limit",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many of the last builds to show.",
)
@format_option
@click.pass_context
@friendly
def derived_show(context: click.Context, name: str, limit: int, fmt: str) -> None:
    """Show a derived table: its definition, sources, rule, state, and its last builds.

    With --format json: one object; with --format csv: the builds, a row each."""
    from siltlake.clock import utcnow

    deployment = deployment_of(context)
    record = deployment.catalog.derived.get(name)
    builds = [_build_row(b) for b in deployment.catalog.derived.builds(record.id)[-limit:]][::-1]
    if fmt == "csv":
        emit(fmt, BUILD_COLUMNS, builds)
        return
    state = _state(deployment, record, utcnow())
    columns = [("dt", "date"), *((c.name, c.type) for c in record.table.definition.columns)]
    if fmt == "json":
        write_json(
            {
                "table": record.qualified_name,
                "definition": record.definition.model_dump(mode="json"),
                "rule": rule_of(record),
                "sources": _sources(deployment, record),
                "columns": [{"name": n, "type": t} for n, t in columns],
                "state": state,
                "rows": _table_rows(deployment, record),
                "builds": builds,
            }
        )
        return
    out.print(Text(record.qualified_name, style="bold"))
    settings = [
        ("rule", rule_of(record)),
        ("incremental", "yes" if record.definition.incremental else "no"),
        ("sources", ", ".join(_sources(deployment, record))),
        ("state", state),
        ("rows", format_count(_table_rows(deployment, record))),
        ("codec", record.definition.codec),
        ("created", _time(record.create_time)),
    ]
    out.print(Text("  ".join(f"{label}: {value}" for label, value in settings)))
    out.print(Text("query: ", style="bold") + Text(record.definition.query))
    out.print(grid([Column("column"), Column("type")], columns))
    emit(
        fmt,
        BUILD_COLUMNS,
        builds,
        title="builds, newest first",
        empty=f"not built yet; `silt derived build {record.qualified_name}` builds it",
    )


@derived_group.command("drop")
@click.argument("name")
@yes_option
@dry_run_option
@json_option
@click.pass_context
@friendly
def derived_drop(context: click.Context, name: str, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Drop a derived table; `silt reap` deletes its builds' objects."""
    from siltlake.clock import utcnow

    derived = deployment_of(context).catalog.derived
    derived.drop(name, utcnow(), dry_run=True)  # an unknown name or a read table fails before the question
    if not dry_run:
        confirm(f"drop derived table {name}?", yes)
    record = derived.drop(name, utcnow(), dry_run=dry_run)
    report(
        as_json,
        {"action": "drop", "dry_run": dry_run, "table": record.qualified_name},
        f"would drop derived table {name} (dry run: nothing changed)"
        if dry_run
        else f"dropped derived table {name}; `silt reap` deletes its builds",
    )


def print_build_report(report: BuildReport) -> None:
    dates = report.dates
    listed = ", ".join(d.isoformat() for d in dates) if len(dates) <= 6 else f"{dates[0]} .. {dates[-1]}"
    version = (
        f"table version {report.table_version}"
        if report.table_version is not None
        else "no date changed, no new version"
    )
    console.print(
        f"[bold]built[/] {report.table} ({report.kind}, build {report.build}): {len(dates)} "
        f"date{'' if len(dates) == 1 else 's'}"
        f"{' (' + listed + ')' if dates else ''}, {report.rows:,} rows, {format_size(report.bytes)}; "
        f"{version}; {report.seconds:.1f}s",
        highlight=False,
        soft_wrap=True,
    )


def print_regenerate_report(report: RegenerateReport, dry_run: bool = False) -> None:
    for built in report.built:
        print_build_report(built)
    for table, why in report.waiting:
        label = "stale" if dry_run else "waiting"
        console.print(f"  [yellow]{label}[/] {table}: {shown(why)}", highlight=False, soft_wrap=True)
    for table, error in report.failed:
        console.print(f"  [red]failed[/] {table}: {shown(error)}", highlight=False, soft_wrap=True)
    fresh = report.checked - len(report.built) - len(report.waiting) - len(report.failed)
    verb = "would build" if dry_run else "built"
    count = len(report.waiting) if dry_run else len(report.built)
    console.print(
        f"[bold]derived[/]: {report.checked} checked, {count} {verb}, {fresh} fresh"
        + (f", {len(report.failed)} failed" if report.failed else ""),
        highlight=False,
    )


def _report_dict(report: RegenerateReport) -> dict[str, Any]:
    return {
        "checked": report.checked,
        "built": [{**b.__dict__, "dates": [d.isoformat() for d in b.dates]} for b in report.built],
        "stale": [{"table": t, "reason": r} for t, r in report.waiting],
        "failed": [{"table": t, "error": e} for t, e in report.failed],
    }


@derived_group.command("build")
@click.argument("names", nargs=-1)
@click.option("--due", is_flag=True, help="Build every derived table that is stale by its rule, sources first.")
@click.option("--full", is_flag=True, help="Rebuild every date, even of an incremental table.")
@dry_run_option
@json_option
@click.pass_context
@friendly
@needs_spark("silt derived build")
def derived_build(
    context: click.Context, names: tuple[str, ...], due: bool, full: bool, dry_run: bool, as_json: bool
) -> None:
    """Build the named derived tables (each once, now), or with --due those that are stale.

    Named tables build whether stale or not, each after the named ones it reads; --dry-run says which
    (of the named ones, or of all) are stale and why, building nothing. Exits 1 if a build failed."""
    from siltlake.derived import RegenerateReport, build_derived, regenerate
    from siltlake.derived.regenerator import in_dependency_order

    if not names and not due and not dry_run:
        raise click.UsageError("name the derived tables to build, or give --due")
    if names and due:
        raise click.UsageError("give table names or --due, not both")
    if full and dry_run:
        raise click.UsageError("--full builds; --dry-run builds nothing: give one")
    deployment = deployment_of(context)
    if due or dry_run:
        if full:
            raise click.UsageError("--full works with table names")
        with activity("checking the derived tables' rules…" if dry_run else "building what is stale…"):
            report = regenerate(deployment, names=list(names) or None, dry_run=dry_run)
    else:
        records = {r.qualified_name: r for r in deployment.catalog.derived.list()}
        for name in names:
            if name not in records:
                deployment.catalog.derived.get(name)  # raises, naming the closest derived table
        report = RegenerateReport()
        for record in in_dependency_order([records[name] for name in dict.fromkeys(names)]):
            report.checked += 1
            try:
                with activity(f"building {record.qualified_name}…"):
                    built = build_derived(deployment, record.qualified_name, full=full)
                report.built.append(built)
            except Exception as exc:  # one table's failure leaves the others to build
                if len(names) == 1:
                    raise
                report.failed.append((record.qualified_name, f"{type(exc).__name__}: {exc}"))
    if as_json:
        write_json(_report_dict(report))
    else:
        print_regenerate_report(report, dry_run)
    if report.failed:
        sys.exit(1)

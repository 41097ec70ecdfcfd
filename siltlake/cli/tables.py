"""`silt table ...`: create, list, show and change tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import format_option, yes_option
from siltlake.cli.output import Column, console, emit, format_count, format_size, grid, out, write_json

if TYPE_CHECKING:
    from siltlake.deployment import Deployment


@click.group("table")
def table_group() -> None:
    """Create, inspect and change tables."""


@table_group.command("create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.pass_context
@friendly
def table_create(context: click.Context, file: str) -> None:
    """Create a table from a definition file (TOML, or YAML)."""
    from siltlake.tabledef import load_table_file

    record = deployment_of(context).catalog.tables.create(load_table_file(file))
    console.print(f"created table {record.qualified_name} "
                  f"(objects under {record.physical_schema_name}.{record.physical_table_name})")


def format_duration(seconds: int) -> str:
    from siltlake.tabledef import format_duration as as_written  # pydantic: not for `silt --help`

    return as_written(seconds)


TABLE_COLUMNS = (
    Column("table"), Column("time_column", "time column"), Column("timezone", "time zone"),
    Column("merge_interval_seconds", "merge interval", format_duration), Column("columns", right=True),
    Column("created_at", "created (UTC)"),
)


@table_group.command("list")
@format_option
@click.pass_context
@friendly
def table_list(context: click.Context, fmt: str) -> None:
    """List tables."""
    records = deployment_of(context).catalog.tables.list()
    emit(fmt, TABLE_COLUMNS, [
        (record.definition.qualified_name, record.definition.time_column, record.definition.timezone,
         record.definition.merge_interval, len(record.definition.columns),
         record.create_time.isoformat(sep=" ", timespec="seconds"))
        for record in records], empty="no tables yet; create one with `silt table create FILE`")


@table_group.command("show")
@click.argument("name")
@format_option
@click.pass_context
@friendly
def table_show(context: click.Context, name: str, fmt: str) -> None:
    """Show a table's definition and its partitions.

    With --format json: one object, the definition as stored (durations in seconds) and the partitions;
    with --format csv: the partitions, a row each."""
    deployment = deployment_of(context)
    record = deployment.catalog.tables.get(name)
    d = record.definition
    partitions = partition_rows(deployment, record.id)
    if fmt == "json":
        write_json({"table": d.qualified_name,
                    "physical": f"{record.physical_schema_name}.{record.physical_table_name}",
                    "definition": d.model_dump(mode="json", by_alias=True), "partitions": partitions})
        return
    if fmt == "csv":
        emit(fmt, PARTITION_COLUMNS, partitions)
        return
    settings = [("physical", f"{record.physical_schema_name}.{record.physical_table_name}"),
                ("time column", d.time_column), ("time zone", d.timezone), ("naive times in", d.naive_zone),
                ("merge interval", format_duration(d.merge_interval)), ("format", d.format), ("codec", d.codec),
                ("error policy", d.error_policy), ("unknown fields", d.unknown_fields), ("epoch unit", d.epoch_unit),
                ("ttl", f"{d.ttl_days} days" if d.ttl_days else "none")]
    if d.keyed:
        settings.append(("primary key", ", ".join(d.primary_key)))
        if d.sequence_column:
            settings.append(("sequence column", d.sequence_column))
    out.print(Text(d.qualified_name, style="bold"))
    out.print(Text("  ".join(f"{label}: {value}" for label, value in settings)))
    out.print(grid([Column("column"), Column("type"), Column("nullable"), Column("source field")],
                   [(c.name, c.type, "yes" if c.nullable else "no", c.source_field) for c in d.columns]))
    emit(fmt, PARTITION_COLUMNS, partitions, title="partitions", empty="no partitions yet")


PARTITION_COLUMNS = (
    Column("date", "dt"), Column("state"),
    *(Column(key, header, format_count, right=True) for key, header in (
        ("live_objects", "live\nobjects"), ("live_rows", "live\nrows"), ("delayed_objects", "delayed\nobjects"),
        ("delayed_rows", "delayed\nrows"))),
    Column("bytes", "size", format_size, right=True),
    *(Column(key, header, format_count, right=True) for key, header in (
        ("merged_objects", "merged\nobjects"), ("merged_rows", "merged\nrows"))),
)


def partition_rows(deployment: Deployment, table_id: int) -> list[dict[str, Any]]:
    """A table's partitions with their object and row counts, as `table show` lists them."""
    rows = []
    for row in deployment.catalog.partitions.summary(table_id):
        closed = row.pop("closed")
        rows.append({"date": row.pop("date").isoformat(), "state": "closed" if closed else "open", **row})
    return rows


@table_group.command("add-column")
@click.argument("name")
@click.argument("column")
@click.argument("type_name", metavar="TYPE")
@click.option("--source", default=None, help="Input field name, if it differs from the column name.")
@click.pass_context
@friendly
def table_add_column(context: click.Context, name: str, column: str, type_name: str,
                     source: str | None) -> None:
    """Add a nullable column (older objects read it as null)."""
    from siltlake.tabledef import Column

    new_column = Column.from_mapping({"name": column, "type": type_name, "source": source})
    deployment_of(context).catalog.tables.add_column(name, new_column)
    console.print(f"added column {column} {new_column.type} to {name}")


@table_group.command("alter-column")
@click.argument("name")
@click.argument("column")
@click.argument("type_name", metavar="TYPE")
@click.option("--rewrite", is_flag=True,
              help="Convert the stored values: needed by every change but int to bigint and float to double.")
@click.pass_context
@friendly
def table_alter_column(context: click.Context, name: str, column: str, type_name: str, rewrite: bool) -> None:
    """Change a column's type. int to bigint and float to double rewrite nothing (older objects read as the new
    type); any other change needs --rewrite: every partition holding a value in the column is rewritten as an
    update version, and rows whose value does not convert move to an error file (`silt errors list | replay`)."""
    from siltlake.publish.retype import alter_column

    report = alter_column(deployment_of(context), name, column, type_name, rewrite=rewrite)
    console.print(f"column {column} of {name} is now {report.new_type} (table version {report.table_version})")
    if report.partitions:
        console.print(f"rewrote {report.partitions} partitions ({report.rows} rows) in {report.seconds:.1f}s")
    if report.bad_rows:
        console.print(f"{report.bad_rows} rows did not convert to {report.new_type} and left the table; they are "
                      f"kept in {report.error_file}: fix them and `silt errors replay {name}`")


@table_group.command("rename-column")
@click.argument("name")
@click.argument("old")
@click.argument("new")
@click.pass_context
@friendly
def table_rename_column(context: click.Context, name: str, old: str, new: str) -> None:
    """Rename a column. No object is rewritten: older objects' data shows under the new name; records keep
    filling it from the same input field."""
    deployment_of(context).catalog.tables.rename_column(name, old, new)
    console.print(f"renamed column {old} of {name} to {new}")


@table_group.command("drop-column")
@click.argument("name")
@click.argument("column")
@yes_option
@click.pass_context
@friendly
def table_drop_column(context: click.Context, name: str, column: str, yes: bool) -> None:
    """Drop a column. No object is rewritten; its data never shows again, not even under a column added later
    with the same name. The time column and key columns cannot be dropped."""
    if not yes:
        click.confirm(f"drop column {column} of {name}?", abort=True)
    deployment_of(context).catalog.tables.drop_column(name, column)
    console.print(f"dropped column {column} of {name}")


@table_group.command("set")
@click.argument("name")
@click.argument("assignments", nargs=-1, metavar="KEY=VALUE...")
@click.pass_context
@friendly
def table_set(context: click.Context, name: str, assignments: tuple[str, ...]) -> None:
    """Change table properties: ttl_days (days or none), merge_mode, merge_interval, merged_object_size,
    row_group_bytes, codec, error_policy, unknown_fields. Each daemon follows them from its next run; the change
    is a table version of its own (`silt history`)."""
    _, change = deployment_of(context).catalog.tables.set_properties(name, assignments)
    if change is not None:
        console.print(f"{name}: {change.detail} (table version {change.table_version})")
    else:
        console.print(f"{name}: nothing changed (the values are the table's already)")


@table_group.command("rename")
@click.argument("name")
@click.argument("new_name")
@click.pass_context
@friendly
def table_rename(context: click.Context, name: str, new_name: str) -> None:
    """Rename a table (logical name only: objects stay under the physical name)."""
    deployment_of(context).catalog.tables.rename(name, new_name)
    console.print(f"renamed {name} to {new_name}")


@table_group.command("drop")
@click.argument("name")
@yes_option
@click.pass_context
@friendly
def table_drop(context: click.Context, name: str, yes: bool) -> None:
    """Drop a table; its objects are removed later by reap."""
    if not yes:
        click.confirm(f"drop table {name}?", abort=True)
    deployment_of(context).catalog.tables.drop(name)
    console.print(f"dropped {name}")

"""`silt table ...`: create, list, show and change tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from siltlake.cli.context import confirm, deployment_of, friendly
from siltlake.cli.options import dry_run_option, format_option, json_option, yes_option
from siltlake.cli.output import Column, emit, format_count, format_size, grid, out, report, write_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from siltlake.catalog import TableChange, TableRecord
    from siltlake.write.alter import TableAlter


@click.group("table")
def table_group() -> None:
    """Create, inspect and change tables."""


def _described(record: TableRecord) -> dict[str, Any]:
    """A table as the --json reports of `silt table ...` give it: its name, physical name and definition."""
    return {
        "table": record.qualified_name,
        "physical": f"{record.physical_schema_name}.{record.physical_table_name}",
        "definition": record.definition.model_dump(mode="json", by_alias=True),
    }


def _altered(
    context: click.Context, name: str, dry_run: bool, change: Callable[[TableAlter], object]
) -> tuple[TableRecord, TableChange | None]:
    """A definition change made through Table.alter (one table version, its Iceberg snapshot at once): the table
    as stored after, and the version made (None: nothing changed)."""
    from siltlake.lake import Lake

    alter = Lake(deployment_of(context)).table(name).alter(dry_run=dry_run)
    change(alter)
    made = alter.commit()
    record = alter.record if alter.record is not None else deployment_of(context).catalog.tables.get(name)
    return record, made


def _would(dry_run: bool, done: str, planned: str) -> str:
    return f"would {planned} (dry run: nothing changed)" if dry_run else done


@table_group.command("create")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@json_option
@click.pass_context
@friendly
def table_create(context: click.Context, file: str, as_json: bool) -> None:
    """Create a table from a definition file (TOML, or YAML)."""
    from siltlake.tabledef import load_table_file

    record = deployment_of(context).catalog.tables.create(load_table_file(file))
    report(
        as_json,
        {"action": "create", **_described(record)},
        f"created table {record.qualified_name} (objects under {record.physical_schema_name}."
        f"{record.physical_table_name})",
    )


def format_duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    from siltlake.defbase import format_duration as as_written

    return as_written(seconds)


TABLE_COLUMNS = (
    Column("table"),
    Column("kind"),
    Column("time_column", "time column", lambda v: v or "-"),
    Column("timezone", "time zone"),
    Column("merge_interval_seconds", "merge interval", format_duration),
    Column("columns", right=True),
    Column("created_at", "created (UTC)"),
)


@table_group.command("list")
@format_option
@click.pass_context
@friendly
def table_list(context: click.Context, fmt: str) -> None:
    """List tables; a derived table (kind "derived", `silt derived list`) has no time column or merge interval."""
    from siltlake.lake import Lake

    rows = []
    for table in Lake(deployment_of(context)).list_tables():
        settings, meta = table.properties, table.metadata
        log = meta.kind == "log"
        rows.append(
            (
                meta.name,
                meta.kind,
                settings["time_column"] if log else None,
                settings["timezone"] if log else None,
                settings["merge_interval"] if log else None,
                len(meta.columns),
                meta.created_at.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds"),
            )
        )
    emit(fmt, TABLE_COLUMNS, rows, empty="no tables yet; create one with `silt table create FILE`")


@table_group.command("show")
@click.argument("name")
@format_option
@click.pass_context
@friendly
def table_show(context: click.Context, name: str, fmt: str) -> None:
    """Show a table's definition and its partitions.

    With --format json: one object, the definition as stored (durations in seconds) and the partitions;
    with --format csv: the partitions, a row each."""
    from siltlake.lake import Lake

    table = Lake(deployment_of(context)).table(name)
    record, meta = table.record, table.metadata
    d = record.definition
    partitions = table.partition_counts()
    sources = dict(meta.settings_from)
    if fmt == "json":
        write_json({**_described(record), "settings_from": sources, "partitions": partitions})
        return
    columns = PARTITION_COLUMNS
    if d.partition_by:  # a partition is a date and its values below it
        columns = (PARTITION_COLUMNS[0], Column("values", "below dt"), *PARTITION_COLUMNS[1:])
    if fmt == "csv":
        emit(fmt, columns, partitions)
        return
    settings = [("physical", meta.physical_name), ("kind", meta.kind)]
    if d.kind == "derived":  # dt comes from its query; its rule and sources: `silt derived show`
        settings += [("format", d.format), ("codec", d.codec), ("defined by", f"silt derived show {d.qualified_name}")]
    else:

        def sourced(key: str, value: str) -> str:  # where an inheritable value comes from, unless the table's own
            return value if sources[key] == "table" else f"{value} (from {sources[key]})"

        settings += [
            ("time column", d.time_column),
            ("time zone", d.timezone),
            ("naive times in", d.naive_zone),
            ("merge interval", sourced("merge_interval", format_duration(d.merge_interval))),
            ("format", d.format),
            ("codec", sourced("codec", d.codec)),
            ("error policy", d.error_policy),
            ("unknown fields", d.unknown_fields),
            ("epoch unit", d.epoch_unit),
            ("ttl", sourced("ttl_days", f"{d.ttl_days} days" if d.ttl_days else "none")),
            ("merge mode", sourced("merge_mode", d.merge_mode)),
            ("merged object size", sourced("merged_object_size", format_size(d.merged_object_size))),
            ("merge batch size", str(d.merge_batch_size)),
        ]
    if d.partition_by:
        settings.append(("partitioned by", ", ".join(["dt", *d.partition_by])))
    if meta.keyed:
        settings.append(("primary key", ", ".join(meta.primary_key)))
        settings.append(("sequence column", d.sequence_column or "none: the last committed row wins"))
    out.print(Text(meta.name, style="bold"))
    out.print(Text("  ".join(f"{label}: {value}" for label, value in settings)))
    out.print(
        grid(
            [Column("column"), Column("type"), Column("nullable"), Column("source field")],
            [(c.name, c.type, "yes" if c.nullable else "no", c.source_field) for c in meta.columns],
        )
    )
    emit(fmt, columns, partitions, title="partitions", empty="no partitions yet")


PARTITION_COLUMNS = (
    Column("date", "dt"),
    Column("state"),
    *(
        Column(key, header, format_count, right=True)
        for key, header in (
            ("live_objects", "live\nobjects"),
            ("live_rows", "live\nrows"),
            ("delayed_objects", "delayed\nobjects"),
            ("delayed_rows", "delayed\nrows"),
        )
    ),
    Column("bytes", "size", format_size, right=True),
    *(
        Column(key, header, format_count, right=True)
        for key, header in (("merged_objects", "merged\nobjects"), ("merged_rows", "merged\nrows"))
    ),
)


@table_group.command("add-column")
@click.argument("name")
@click.argument("column")
@click.argument("type_name", metavar="TYPE")
@click.option("--source", default=None, help="Input field name, if it differs from the column name.")
@json_option
@click.pass_context
@friendly
def table_add_column(
    context: click.Context, name: str, column: str, type_name: str, source: str | None, as_json: bool
) -> None:
    """Add a nullable column (older objects read it as null)."""
    from siltlake.tabledef import Column

    new_column = Column.from_mapping({"name": column, "type": type_name, "source": source})
    record, _ = _altered(context, name, False, lambda alter: alter.add_column(column, type_name, source))
    report(
        as_json,
        {"action": "add-column", "column": column, "type": new_column.type, **_described(record)},
        f"added column {column} {new_column.type} to {name}",
    )


@table_group.command("alter-column")
@click.argument("name")
@click.argument("column")
@click.argument("type_name", metavar="TYPE")
@click.option(
    "--rewrite",
    is_flag=True,
    help="Convert the stored values: needed by every change but int to bigint and float to double.",
)
@dry_run_option
@json_option
@click.pass_context
@friendly
def table_alter_column(
    context: click.Context, name: str, column: str, type_name: str, rewrite: bool, dry_run: bool, as_json: bool
) -> None:
    """Change a column's type. int to bigint and float to double rewrite nothing (older objects read as the new
    type); any other change needs --rewrite: every partition holding a value in the column is rewritten as an
    update version, and rows whose value does not convert move to an error file (`silt errors list | replay`)."""
    from siltlake.lake import Lake

    done = Lake(deployment_of(context)).table(name).alter_column(column, type_name, rewrite=rewrite, dry_run=dry_run)
    planned = (
        f"convert column {column} of {name} to {done.new_type}, rewriting the partitions that hold a value in it"
        if rewrite
        else f"make column {column} of {name} {done.new_type}"
    )
    sentence = _would(
        dry_run, f"column {column} of {name} is now {done.new_type} (table version {done.table_version})", planned
    )
    if done.partitions:
        sentence += f"; rewrote {done.partitions} partitions ({done.rows} rows) in {done.seconds:.1f}s"
    if done.bad_rows:
        sentence += (
            f"; {done.bad_rows} rows did not convert to {done.new_type} and left the table: they are kept "
            f"in {done.error_file}: fix them and `silt errors replay {name}`"
        )
    report(
        as_json,
        {
            "action": "alter-column",
            "dry_run": dry_run,
            "column": column,
            "type": done.new_type,
            "old_type": done.old_type,
            "table_version": done.table_version,
            "rewritten_partitions": done.partitions,
            "rows": done.rows,
            "bad_rows": done.bad_rows,
            "error_file": done.error_file,
        },
        sentence,
    )


@table_group.command("rename-column")
@click.argument("name")
@click.argument("old")
@click.argument("new")
@dry_run_option
@json_option
@click.pass_context
@friendly
def table_rename_column(context: click.Context, name: str, old: str, new: str, dry_run: bool, as_json: bool) -> None:
    """Rename a column. No object is rewritten: older objects' data shows under the new name; records keep
    filling it from the same input field."""
    record, _ = _altered(context, name, dry_run, lambda alter: alter.rename_column(old, new))
    report(
        as_json,
        {"action": "rename-column", "dry_run": dry_run, "column": old, "new_name": new, **_described(record)},
        _would(dry_run, f"renamed column {old} of {name} to {new}", f"rename column {old} of {name} to {new}"),
    )


@table_group.command("drop-column")
@click.argument("name")
@click.argument("column")
@yes_option
@dry_run_option
@json_option
@click.pass_context
@friendly
def table_drop_column(context: click.Context, name: str, column: str, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Drop a column. No object is rewritten; its data never shows again, not even under a column added later
    with the same name. The time column and key columns cannot be dropped."""
    record, _ = _altered(context, name, True, lambda alter: alter.drop_column(column))  # refused before the question
    if not dry_run:
        confirm(f"drop column {column} of {name}?", yes)
        record, _ = _altered(context, name, False, lambda alter: alter.drop_column(column))
    report(
        as_json,
        {"action": "drop-column", "dry_run": dry_run, "column": column, **_described(record)},
        _would(dry_run, f"dropped column {column} of {name}", f"drop column {column} of {name}"),
    )


@table_group.command("set")
@click.argument("name")
@click.argument("assignments", nargs=-1, metavar="KEY=VALUE...")
@dry_run_option
@json_option
@click.pass_context
@friendly
def table_set(context: click.Context, name: str, assignments: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Change table properties: ttl_days (days or none), merge_mode, merge_interval, merged_object_size,
    row_group_bytes, codec, error_policy, unknown_fields, merge_batch_size. Of those a table inherits (merge_mode,
    merged_object_size, ttl_days, codec, merge_interval), KEY=inherit takes the schema's value again (`silt schema
    set`). Each daemon follows them from its next run; the change is a table version of its own (`silt history`)."""
    from siltlake.catalog.table_changes import parse_assignments

    values = parse_assignments(assignments)
    record, change = _altered(context, name, dry_run, lambda alter: alter.set_properties(**values))
    document = {
        "action": "set",
        "dry_run": dry_run,
        "changed": change.detail if change else None,
        "table_version": change.table_version if change and not dry_run else None,
        **_described(record),
    }
    if change is None:
        sentence = f"{name}: nothing changed (the values are the table's already)"
    else:
        sentence = _would(
            dry_run, f"{name}: {change.detail} (table version {change.table_version})", f"set {change.detail} on {name}"
        )
    report(as_json, document, sentence)


@table_group.command("rename")
@click.argument("name")
@click.argument("new_name")
@dry_run_option
@json_option
@click.pass_context
@friendly
def table_rename(context: click.Context, name: str, new_name: str, dry_run: bool, as_json: bool) -> None:
    """Rename a table (logical name only: objects stay under the physical name)."""
    record = deployment_of(context).catalog.tables.rename(name, new_name, dry_run=dry_run)
    report(
        as_json,
        {"action": "rename", "dry_run": dry_run, "old_name": name, **_described(record)},
        _would(dry_run, f"renamed {name} to {new_name}", f"rename {name} to {new_name}"),
    )


@table_group.command("drop")
@click.argument("name")
@yes_option
@dry_run_option
@json_option
@click.pass_context
@friendly
def table_drop(context: click.Context, name: str, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Drop a table; its objects are removed later by reap."""
    tables = deployment_of(context).catalog.tables
    tables.drop(name, dry_run=True)  # an unknown name, or one a derived table reads, is refused before the question
    if not dry_run:
        confirm(f"drop table {name}?", yes)
    record = tables.drop(name, dry_run=dry_run)
    report(
        as_json,
        {"action": "drop", "dry_run": dry_run, **_described(record)},
        _would(dry_run, f"dropped {name}; `silt reap` deletes its objects", f"drop {name}"),
    )


@table_group.command("tag")
@click.argument("name")
@click.argument("tag", required=False)
@click.option(
    "--version",
    "version",
    type=int,
    default=None,
    metavar="N",
    help="The table version the tag names (default: the newest).",
)
@click.option("--move", is_flag=True, help="Let a tag that names another version name this one.")
@click.option("--remove", is_flag=True, help="Forget the tag: its version is then reaped as any other.")
@json_option
@click.pass_context
@friendly
def table_tag(
    context: click.Context, name: str, tag: str | None, version: int | None, move: bool, remove: bool, as_json: bool
) -> None:
    """Name a table version: read it as VERSION AS OF 'TAG' in `silt sql` (as_of_version="TAG" in Python); reap
    keeps what a tagged version shows, however old. Without TAG, list the table's tags."""
    from siltlake.lake import Lake

    table = Lake(deployment_of(context)).table(name)
    if tag is None:
        if move or remove or version is not None:
            raise click.UsageError("give the TAG to make, move or remove")
        tags = table.tags
        report(
            as_json,
            {"action": "tags", "table": table.name, "tags": tags},
            ", ".join(f"{key}: version {value}" for key, value in tags.items()) or f"{table.name} has no tags",
        )
        return
    if remove:
        gone = table.untag(tag)
        report(
            as_json,
            {"action": "untag", "table": table.name, "tag": tag, "table_version": gone.table_version},
            f"{table.name}: tag {tag} (version {gone.table_version}) removed",
        )
        return
    made = table.tag(tag, version, move=move)
    report(
        as_json,
        {"action": "tag", "table": table.name, "tag": tag, "table_version": made.table_version},
        f"{table.name}: tag {tag} names version {made.table_version}",
    )

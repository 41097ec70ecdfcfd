"""`silt schema ...`: the settings a schema gives the tables in it that do not set them (docs/design.md "Settings
inherited")."""

from __future__ import annotations

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import dry_run_option, json_option
from siltlake.cli.output import report
from siltlake.tabledef import INHERITED_SETTINGS


@click.group("schema")
def schema_group() -> None:
    """Settings a schema's tables inherit."""


@schema_group.command("set")
@click.argument("schema")
@click.argument("assignments", nargs=-1, metavar="KEY=VALUE...")
@dry_run_option
@json_option
@click.pass_context
@friendly
def schema_set(context: click.Context, schema: str, assignments: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Set what the schema's tables inherit: merge_mode, merged_object_size, ttl_days, codec, merge_interval
    (KEY=inherit hands one back to the deployment's config). Each table of the schema that does not set the key
    itself follows, its change a table version of its own (`silt history`)."""
    deployment = deployment_of(context)
    changed, tables = deployment.catalog.tables.set_schema(schema, assignments, dry_run=dry_run)
    if not dry_run:
        from siltlake.publish.iceberg.follow import follow

        for name, _ in tables:  # each version's Iceberg snapshot at once, as a table's own change
            follow(deployment, deployment.catalog.tables.get(name))
    detail = " ".join(f"{key}={value}" for key, value in changed.items())
    document = {
        "action": "schema-set",
        "dry_run": dry_run,
        "schema": schema,
        "changed": changed,
        "tables": [
            {"table": name, "changed": change.detail, "table_version": None if dry_run else change.table_version}
            for name, change in tables
        ],
    }
    if not changed:
        sentence = f"schema {schema}: nothing changed (the values are the schema's already)"
    else:
        followed = ", ".join(f"{name} (table version {change.table_version})" for name, change in tables) or "none"
        sentence = (
            f"would set {detail} on schema {schema} (dry run: nothing changed)"
            if dry_run
            else f"schema {schema}: {detail}; tables that inherit it: {followed}"
        )
    report(as_json, document, sentence)


@schema_group.command("show")
@click.argument("schema")
@json_option
@click.pass_context
@friendly
def schema_show(context: click.Context, schema: str, as_json: bool) -> None:
    """The settings the schema gives its tables, and those of the deployment's config below them."""
    from siltlake.catalog.inherited import inherited_value  # the catalog only when a command runs: fast --help
    from siltlake.catalog.table_changes import shown

    tables = deployment_of(context).catalog.tables
    own = tables.schema_settings(schema)
    settings = {key: inherited_value(key, own, tables.deployment_settings) for key in INHERITED_SETTINGS}
    document = {
        "schema": schema,
        "settings": {key: {"value": value, "from": source} for key, (value, source) in settings.items()},
    }
    sentence = f"schema {schema}: " + "  ".join(
        f"{key}: {shown(key, value)} ({source})" for key, (value, source) in settings.items()
    )
    report(as_json, document, sentence)

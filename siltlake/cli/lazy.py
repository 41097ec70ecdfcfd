"""The `silt` group's commands, imported on first use: listing them (`silt --help`) reads the registry's short
help and imports no command module; running or asking help for one imports only that command's module."""

from __future__ import annotations

import importlib
import os
import time
from typing import NamedTuple

import click

from siltlake.cli.context import SiltGroup


class Entry(NamedTuple):
    """Where a command lives (module under siltlake.cli, attribute) and its one-line help for the listing."""

    module: str
    attribute: str
    short_help: str


# Kept equal to each command's own short help by tests/test_cli_lazy.py.
REGISTRY: dict[str, Entry] = {
    "init": Entry(
        "init", "init", "Create or upgrade the catalog and storage roots; register this deployment's instance key."
    ),
    "table": Entry("tables", "table_group", "Create, inspect and change tables."),
    "stream": Entry("stream", "stream", "Turn staging objects into live and delayed small objects."),
    "merge": Entry(
        "merge", "merge", "Merge each day's small objects into a few large ones: the merge job queue's worker."
    ),
    "status": Entry(
        "status",
        "status",
        "Per table: partitions by state, unmerged small objects, merge jobs by "
        "state, parked failures; then staging objects whose processing is failing.",
    ),
    "publish": Entry(
        "publish",
        "publish",
        "Make new data visible to readers: switch merged days to their merged "
        "objects, close ended days, publish new live and merged versions (and sync...",
    ),
    "run": Entry(
        "run",
        "run_command",
        "Single host: stream, merge and publish in one process on one SparkSession, with a live status.",
    ),
    "history": Entry("history", "history", "A table's or one partition's published versions."),
    "changes": Entry(
        "changes",
        "changes",
        "The rows each version of table NAME after --from (up to --to) "
        "inserted or deleted, with _change_type, _commit_version and _commit_timestamp.",
    ),
    "delete": Entry(
        "delete",
        "delete",
        "Delete the rows matching --where (e.g. an erasure request) from every "
        "partition given (neither --date nor --all-dates: those --where's conditions...",
    ),
    "upsert": Entry(
        "upsert",
        "upsert_command",
        "Replace the rows of NAME (a table with a primary_key) that have "
        "the same date and key as the rows of FILE (or of --sql's result); one `merge`...",
    ),
    "update": Entry(
        "update",
        "update_command",
        "Set columns of the rows of NAME matching --where in every "
        "partition given (neither --date nor --all-dates: those --where's conditions on dt allow,...",
    ),
    "restore": Entry(
        "restore",
        "restore_command",
        "Publish one new table version of NAME whose partitions show "
        "exactly what --version N (or the version current at --as-of TIME) showed: the...",
    ),
    "reap": Entry(
        "reap",
        "reap",
        "Delete covered small objects, superseded merged objects, expired versions, "
        "orphans, partitions past their TTL and dropped tables: only objects...",
    ),
    "unknown": Entry("unknown", "unknown_group", "Staging objects that map to no table or cannot be read."),
    "staging": Entry("staging", "staging_group", "Local staging files followed as they are appended to."),
    "errors": Entry("bad_records", "errors_group", "Bad records kept by tables whose error_policy is 'file'."),
    "sql": Entry("sql", "sql_command", "Run Spark SQL over the tables, named schema.table."),
    "guess": Entry(
        "load", "guess_command", "Read a sample of the seed's inputs and write a full load config to review."
    ),
    "load": Entry("load", "load_command", "Bulk-load files into tables: one Spark stage, one commit."),
    "cleanup": Entry(
        "load",
        "cleanup_command",
        "Remove what an abandoned load wrote (temporary objects, error files) and its resume state.",
    ),
    "dashboard": Entry(
        "observing",
        "dashboard_command",
        "Serve the read-only dashboard: per table, charts over "
        "time of the backlog, freshness, small-file debt and merge throughput (the history the "
        "daemons...",
    ),
    "derived": Entry(
        "derived",
        "derived_group",
        "Derived tables: a Spark SQL query over tables, built into a table and rebuilt when it goes stale.",
    ),
    "iceberg": Entry("iceberg", "iceberg_group", 'The Iceberg tables publish.targets = ["iceberg"] keeps.'),
    "schema": Entry("schemas", "schema_group", "Settings a schema's tables inherit."),
    "forkserver": Entry(
        "forkserver",
        "forkserver_group",
        "Keep a process with siltlake's libraries imported that starts each `silt` command as its fork.",
    ),
}

SHORT_HELP_LIMIT = 150  # the listing's width for a command's help: long enough that no registry line is cut


def load_command(name: str) -> click.Command:
    """The command `name` of the registry, its module imported now."""
    entry = REGISTRY[name]
    module = importlib.import_module(f"siltlake.cli.{entry.module}")
    command = getattr(module, entry.attribute)
    assert isinstance(command, click.Command), (name, command)
    return command


class LazyGroup(SiltGroup):
    """A SiltGroup whose commands come from REGISTRY, each module imported when its command is resolved."""

    command_import_seconds = 0.0  # read by the --profile report

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if os.environ.get("SILT_PROFILE", "") not in ("", "0"):  # before --help or --version can end the process
            from siltlake.cli.profile import start_profile

            start_profile(lambda: LazyGroup.command_import_seconds)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*REGISTRY, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name not in REGISTRY:
            return None
        started = time.perf_counter()
        command = load_command(cmd_name)
        LazyGroup.command_import_seconds += time.perf_counter() - started
        self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's listing, the short help of a command not yet imported taken from the registry."""
        names = [name for name in self.list_commands(ctx) if not (name in self.commands and self.commands[name].hidden)]
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)  # as click's own listing
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            if loaded is None:
                # A stand-in command shortens the registry's text exactly as click shortens a command's own.
                rows.append((name, click.Command(name, help=REGISTRY[name].short_help).get_short_help_str(limit)))
            else:
                rows.append((name, loaded.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

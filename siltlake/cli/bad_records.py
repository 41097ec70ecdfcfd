"""`silt errors ...`: the bad records kept by tables whose error_policy is 'file'."""

from __future__ import annotations

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import dry_run_option, format_option, json_option
from siltlake.cli.output import Column, emit, format_count, report


@click.group("errors")
def errors_group() -> None:
    """Bad records kept by tables whose error_policy is 'file'."""


ERROR_FILE_COLUMNS = (
    Column("error_file", "error file"),
    Column("bad_records", "bad records", format_count, right=True),
)


@errors_group.command("list")
@click.argument("name")
@format_option
@click.pass_context
@friendly
def errors_list(context: click.Context, name: str, fmt: str) -> None:
    """List a table's error files and their bad record counts."""
    from siltlake.stream.replay import error_files

    deployment = deployment_of(context)
    files = error_files(deployment, name)
    emit(
        fmt,
        ERROR_FILE_COLUMNS,
        [(deployment.lake.uri(key), count) for key, count in files],
        empty=f"no kept bad records for {name}",
    )


@errors_group.command("replay")
@click.argument("name")
@dry_run_option
@json_option
@click.pass_context
@friendly
def errors_replay(context: click.Context, name: str, dry_run: bool, as_json: bool) -> None:
    """Stage the (edited) raw records of a table's error files again, one staging object per error file."""
    from siltlake.stream.replay import replay_errors

    result = replay_errors(deployment_of(context), name, dry_run=dry_run)
    if dry_run:
        sentence = (
            f"would stage {result.records} records; {result.kept} records that are still not JSON objects "
            "would stay in their error files (dry run: nothing changed)"
        )
    else:
        sentence = (
            f"staged {result.records} records as {len(result.staging_uris)} staging objects; "
            f"{result.kept} records that are still not JSON objects stay in their error files. "
            "Run `silt stream --once` to load them."
        )
    report(
        as_json,
        {
            "action": "replay",
            "table": name,
            "dry_run": dry_run,
            "records": result.records,
            "kept": result.kept,
            "staging_uris": result.staging_uris,
        },
        sentence,
    )

"""`silt reap`: delete what no reader, writer or retained version needs any more."""

from __future__ import annotations

import sys

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import dry_run_option, json_option, now_option, parse_now
from siltlake.cli.output import activity, write_json
from siltlake.cli.reports import print_reap_report


def _duration(value: str | None, option: str) -> int | None:
    from siltlake.defbase import parse_duration
    from siltlake.errors import DefinitionError

    if value is None:
        return None
    try:
        return parse_duration(int(value) if value.isdigit() else value, option)
    except DefinitionError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


@click.command()
@dry_run_option
@now_option
@click.option("--retention", default=None, help="Keep superseded versions this long (default reap.retention, 7d).")
@click.option("--grace", default=None, help="Unreferenced objects younger than this are kept (default reap.grace, 3d).")
@click.option("--force", is_flag=True, help="Allow a retention below 1d or a grace below 1h.")
@click.option(
    "--full",
    is_flag=True,
    help="List the whole instance key, not only what changed since the last run "
    "(a full sweep also runs by itself when none ran within reap.full_sweep_interval).",
)
@json_option
@click.pass_context
@friendly
def reap(
    context: click.Context,
    dry_run: bool,
    now_text: str | None,
    retention: str | None,
    grace: str | None,
    force: bool,
    full: bool,
    as_json: bool,
) -> None:
    """Delete covered small objects, superseded merged objects, expired versions, orphans, partitions past
    their TTL and dropped tables: only objects under this deployment's instance key, never another
    deployment's sharing the storage."""
    from siltlake.reap import reap_once

    deployment = deployment_of(context)
    with activity("reaping: reading the catalog, listing the lake, deleting what nothing needs…"):
        report = reap_once(
            deployment,
            parse_now(now_text),
            dry_run=dry_run,
            retention=_duration(retention, "--retention"),
            grace=_duration(grace, "--grace"),
            force=force,
            full=full or None,
        )
    if as_json:
        write_json(report.as_dict())
    else:
        print_reap_report(report)
    if report.failed:
        sys.exit(1)

"""`silt restore`: a new table version that shows what an older one showed."""

from __future__ import annotations

import click

from siltlake.cli.context import confirm, deployment_of, friendly, needs_spark
from siltlake.cli.options import parse_now, yes_option
from siltlake.cli.output import Column, activity, format_count, grid, out, write_json
from siltlake.cli.writes import write_options

OUTCOME_COLUMNS = (
    Column("dt"),
    Column("rows now", show=format_count, right=True),
    Column("rows restored", show=format_count, right=True),
    Column("version", right=True),
)


@click.command("restore")
@click.argument("name")
@click.option(
    "--version",
    "version",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The table version to restore (`silt history NAME` lists them).",
)
@click.option(
    "--as-of",
    "as_of_text",
    default=None,
    metavar="TIME",
    help="Restore the newest version published at or before this time: ISO-8601, e.g. "
    "2026-11-20T05:00:00Z (no offset means UTC).",
)
@write_options
@yes_option
@click.pass_context
@friendly
@needs_spark("silt restore")
def restore_command(
    context: click.Context,
    name: str,
    version: int | None,
    as_of_text: str | None,
    now_text: str | None,
    request_id: str | None,
    dry_run: bool,
    as_json: bool,
    yes: bool,
) -> None:
    """Publish one new table version of NAME whose partitions show exactly what --version N (or the version
    current at --as-of TIME) showed: the partitions that differ are rewritten, the others left alone. Older
    versions stay readable (time travel); a version reap has removed cannot be restored."""
    from siltlake.clock import parse_time
    from siltlake.lake import Lake

    if (version is None) == (as_of_text is None):
        raise click.UsageError("give the version to restore: --version N or --as-of TIME")
    as_of = None
    if as_of_text is not None:
        try:
            as_of = parse_time(as_of_text)
        except ValueError:
            raise click.BadParameter(
                f"{as_of_text!r} is not an ISO-8601 time such as 2026-11-20T05:00:00Z", param_hint="--as-of"
            ) from None
    now = parse_now(now_text)
    table = Lake(deployment_of(context)).table(name)
    # Resolved once: the plan, the question and the restore are all of this version, whatever is published meanwhile.
    target = table.restore_target(version, as_of)
    plan = table.restore(target, request_id=request_id, now=now, dry_run=True)
    if not dry_run and plan.applied_before is None and len(plan):
        confirm(
            f"Restore {table.name} to table version {target}, rewriting {len(plan)} partitions "
            f"({', '.join(p.partition_date.isoformat() for p in plan)})?",
            yes,
        )
    report = plan
    if not dry_run:
        with activity(f"restoring {name} to version {target}…") as step:
            report = table.restore(
                target,
                request_id=request_id,
                now=now,
                progress=lambda done, date: step(f"restoring {name} dt={date} ({done + 1} of {len(plan)} partitions)…"),
            )
    if as_json:
        write_json({**report.as_dict(), "restored_version": target, "dry_run": dry_run})
    elif report.applied_before is not None:
        out.print(report.message, highlight=False, soft_wrap=True)
    elif not len(report):
        out.print(f"{table.name} shows table version {target}'s rows already; nothing was changed", highlight=False)
    else:
        out.print(
            grid(
                OUTCOME_COLUMNS,
                [
                    (
                        p.partition_date.isoformat(),
                        p.rows_before,
                        p.rows_after,
                        "dry run" if dry_run else str(p.version.version) if p.version else "-",
                    )
                    for p in report
                ],
            )
        )
        if report.table_version is not None:
            out.print(
                f"{table.name} is now at table version {report.table_version}, showing what version {target} showed",
                highlight=False,
            )

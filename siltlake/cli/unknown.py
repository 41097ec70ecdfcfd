"""`silt unknown ...`: staging objects that map to no table or cannot be read."""

from __future__ import annotations

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import dry_run_option, format_option, json_option
from siltlake.cli.output import Column, emit, format_size, out, report


@click.group("unknown")
def unknown_group() -> None:
    """Staging objects that map to no table or cannot be read."""


UNKNOWN_COLUMNS = (
    Column("uri"),
    Column("bytes", "size", format_size, right=True),
    Column("table", show=lambda name: name or "-"),
    Column("detected_at", "detected (UTC)"),
    Column("reason"),
)


@unknown_group.command("list")
@format_option
@click.pass_context
@friendly
def unknown_list(context: click.Context, fmt: str) -> None:
    """List them with the reason (`silt unknown replay` streams them again)."""
    rows = deployment_of(context).catalog.staging.unknown()
    emit(
        fmt,
        UNKNOWN_COLUMNS,
        [
            (row.uri, row.size or 0, row.table_name, row.detect_time.isoformat(sep=" ", timespec="seconds"), row.reason)
            for row in rows
        ],
        empty="no unknown staging objects",
    )
    if rows and fmt == "table":
        out.print(f"{len(rows)} unknown staging objects")


@unknown_group.command("replay")
@click.argument("uris", nargs=-1)
@click.option("--all", "replay_all", is_flag=True, help="Replay every unknown object.")
@dry_run_option
@json_option
@click.pass_context
@friendly
def unknown_replay(
    context: click.Context, uris: tuple[str, ...], replay_all: bool, dry_run: bool, as_json: bool
) -> None:
    """Forget unknown objects so the next stream run looks at them again (after a fix or a new table)."""
    if not uris and not replay_all:
        raise click.UsageError("name the URIs to replay, or pass --all")
    deployment = deployment_of(context)
    if dry_run:
        replayed = [row.uri for row in deployment.catalog.staging.unknown() if replay_all or row.uri in uris]
    else:
        from siltlake.stream.discover import readmit

        replayed = deployment.catalog.staging.forget_unknown(None if replay_all else list(uris))
        # Registered here rather than left to a listing, which may not look at them again (stream/discover.py).
        readmit(deployment, replayed)
    not_unknown = sorted(set(uris) - set(replayed))
    sentence = (
        f"would stream {len(replayed)} objects again (dry run: nothing changed)"
        if dry_run
        else f"{len(replayed)} objects will be streamed again by the next `silt stream` run"
    )
    if not_unknown:
        sentence += f"; not unknown objects, left alone: {', '.join(not_unknown)}"
    report(as_json, {"action": "replay", "dry_run": dry_run, "uris": replayed, "not_unknown": not_unknown}, sentence)

"""`silt staging ...`: local staging files followed in place (docs/design.md, "Files written in place and appended
to")."""

from __future__ import annotations

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import json_option
from siltlake.cli.output import report


@click.group("staging")
def staging_group() -> None:
    """Local staging files followed as they are appended to."""


@staging_group.command("resume")
@click.argument("uri")
@click.option(
    "--from-offset",
    "offset",
    type=click.IntRange(min=0),
    required=True,
    help="The byte offset to follow the file from: the bytes before it count as loaded (of the "
    "file as stored, a gzip member's start for a gzip file).",
)
@json_option
@click.pass_context
@friendly
def staging_resume(context: click.Context, uri: str, offset: int, as_json: bool) -> None:
    """Follow a file whose following stopped (`silt status` lists them) again from a byte offset: the next stream
    round loads what it holds from there, once. To load it again whole, give 0; to skip what was loaded, give the
    offset the status shows."""
    from siltlake.stream.rotation import resume_file

    position = resume_file(deployment_of(context), uri, offset)
    report(
        as_json,
        {"action": "resume", "uri": position.uri, "offset": offset},
        f"{position.uri} is followed again from offset {offset:,}: the next `silt stream` round loads what it "
        "holds from there",
    )

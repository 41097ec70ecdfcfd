"""`silt init`: create or upgrade the catalog and the storage roots."""

from __future__ import annotations

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.options import json_option
from siltlake.cli.output import console, write_json


@click.command()
@click.option(
    "--claim",
    is_flag=True,
    help="Take the instance key over from the catalog its _instance.json names "
    "(after moving the catalog, or once that catalog is gone); refused while it is reachable and still "
    "registers the key.",
)
@json_option
@click.pass_context
@friendly
def init(context: click.Context, claim: bool, as_json: bool) -> None:
    """Create or upgrade the catalog and storage roots; register this deployment's instance key."""
    deployment = deployment_of(context, ready=False)  # init makes it ready
    key = deployment.init(claim=claim)
    # Password masked: init output ends up in terminals' scrollback and in logs.
    catalog = deployment.catalog
    if as_json:
        write_json(
            {
                "action": "init",
                "catalog": catalog.masked_url,
                "revision": catalog.revision(),
                "lake": deployment.lake.root,
                "staging": deployment.staging.root,
                "instance": key,
                "config": deployment.config.source,
            }
        )
        return
    console.print(f"catalog   {catalog.masked_url} at revision {catalog.revision()}", highlight=False)
    console.print(f"lake      {deployment.lake.root}")
    console.print(f"staging   {deployment.staging.root}")
    console.print(f"instance  {key}   (config: {deployment.config.source})")

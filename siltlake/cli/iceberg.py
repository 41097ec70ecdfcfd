"""`silt iceberg serve`: the Iceberg target's tables through a read-only Iceberg REST catalog."""

from __future__ import annotations

import signal
import threading

import click

from siltlake.cli.context import deployment_of, friendly
from siltlake.cli.output import console


@click.group("iceberg")
def iceberg_group() -> None:
    """The Iceberg tables publish.targets = ["iceberg"] keeps."""


@iceberg_group.command("serve")
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    metavar="HOST",
    help="The address to listen on (loopback by default: anyone who reaches it reads every table).",
)
@click.option("--port", type=int, default=8181, show_default=True, help="The port to serve on.")
@click.pass_context
@friendly
def serve(context: click.Context, bind: str, port: int) -> None:
    """Serve the Iceberg tables and snapshots as a read-only Iceberg REST catalog (Trino, Spark, DuckDB and
    PyIceberg attach it with no access to siltlake's catalog database); Ctrl-C stops."""
    from siltlake.publish.iceberg.rest import IcebergRestServer

    server = IcebergRestServer(deployment_of(context), bind, port).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    console.print(f"Iceberg REST catalog (read-only) at {server.url}; Ctrl-C stops")
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()

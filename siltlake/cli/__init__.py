"""The `silt` command line: the `main` group and its commands, one module per command or group.

Importing a command module is cheap (click and rich); each command imports the library it drives when it
runs, so `silt --help` starts without SQLAlchemy, pyarrow, pyspark or pydantic. The shared options are in
cli.options, the output layer in cli.output, the reports in cli.reports, the deployment and failure
handling in cli.context.
"""

from __future__ import annotations

import os

import click

from siltlake.cli import (
    changes,
    delete,
    derived,
    errors,
    history,
    iceberg,
    init,
    load,
    merge,
    observing,
    publish,
    reap,
    restore,
    run,
    schemas,
    sql,
    staging,
    status,
    stream,
    tables,
    unknown,
    update,
    upsert,
)
from siltlake.cli.context import SiltGroup
from siltlake.errors import DEBUG_VARIABLE


@click.group(cls=SiltGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "-c", type=click.Path(dir_okay=False), default=None,
              help="Configuration file (default: $SILTLAKE_CONFIG or ./siltlake.toml, else built-in defaults).")
@click.option("--debug", is_flag=True, help=f"On failure print the full trace (Python, and Java for Spark errors) "
              f"and Spark's error log; ${DEBUG_VARIABLE}=1 does the same.")
@click.option("--log-format", type=click.Choice(("text", "json")), default="text", show_default=True,
              help="Log lines on stderr: text (key=value fields) or json (one object per line).")
@click.option("--log-level", type=click.Choice(("debug", "info", "warning", "error")), default=None,
              help="The least severe log lines shown (default: info for the daemons, warning otherwise).")
@click.version_option(package_name="siltlake")
@click.pass_context
def main(context: click.Context, config: str | None, debug: bool, log_format: str, log_level: str | None) -> None:
    """siltlake: small log batches in, date-partitioned Parquet tables out."""
    if debug:
        os.environ[DEBUG_VARIABLE] = "1"  # Spark sessions started later read it too
    log_level = log_level or ("debug" if debug else None)
    context.obj = {"config": config, "log_format": log_format, "log_level": log_level}
    from siltlake.logs import configure

    configure(log_format, log_level or "warning")


COMMANDS = (
    init.init, tables.table_group, stream.stream, merge.merge, status.status, publish.publish, run.run_command,
    history.history, changes.changes, delete.delete, upsert.upsert_command, update.update_command,
    restore.restore_command, reap.reap, unknown.unknown_group, staging.staging_group,
    errors.errors_group,
    sql.sql_command, load.guess_command, load.load_command, load.cleanup_command, observing.dashboard_command,
    derived.derived_group, iceberg.iceberg_group, schemas.schema_group,
)
for command in COMMANDS:
    main.add_command(command)

if __name__ == "__main__":
    main()

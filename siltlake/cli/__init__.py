"""The `silt` command line: the `main` group and its commands, one module per command or group.

A command's module is imported only when that command runs or shows its help (cli.lazy: `silt --help` lists
the commands from its registry), and each command imports the library it drives when it runs, so `silt --help`
starts without SQLAlchemy, pyarrow, pyspark or pydantic. The shared options are in
cli.options, the output layer in cli.output, the reports in cli.reports, the deployment and failure
handling in cli.context.
"""

from __future__ import annotations

import os

import click

from siltlake.cli.lazy import LazyGroup
from siltlake.errors import DEBUG_VARIABLE


def start_profile_option(context: click.Context, parameter: click.Parameter, value: bool) -> None:
    """--profile is eager and read first, so `silt --profile --help` is profiled too."""
    if value:
        from siltlake.cli.profile import start_profile

        start_profile(lambda: LazyGroup.command_import_seconds)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "-c",
    type=click.Path(dir_okay=False),
    default=None,
    help="Configuration file (default: $SILTLAKE_CONFIG or ./siltlake.toml, else built-in defaults).",
)
@click.option(
    "--debug",
    is_flag=True,
    help=f"On failure print the full trace (Python, and Java for Spark errors) "
    f"and Spark's error log; ${DEBUG_VARIABLE}=1 does the same.",
)
@click.option(
    "--log-format",
    type=click.Choice(("text", "json")),
    default="text",
    show_default=True,
    help="Log lines on stderr: text (key=value fields) or json (one object per line).",
)
@click.option(
    "--log-level",
    type=click.Choice(("debug", "info", "warning", "error")),
    default=None,
    help="The least severe log lines shown (default: info for the daemons, warning otherwise).",
)
@click.option(
    "--profile",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=start_profile_option,
    help="At exit print on stderr where the time went: start-up imports, the command, the costliest "
    "imports; $SILT_PROFILE=1 does the same.",
)
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


if __name__ == "__main__":
    main()

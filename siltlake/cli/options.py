"""The options several commands share, each defined once here: wherever it appears, a flag has the same
name, meaning, help text and parsing (docs: docs/operations.md, "Command reference")."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Any

import click

from siltlake.cli.output import FORMATS

FORMAT_HELP = (
    "table: aligned columns to read (full width when stdout is not a terminal); json: one JSON "
    "document, a list with an object per row; csv: a header row, then a row per line, lines "
    "ending in \\n. --json is short for --format json."
)
JSON_HELP = "Print the result on stdout as one JSON document, for scripts."
ONCE_HELP = "Do one round of the command's work, then exit; without it the command runs until stopped (Ctrl-C)."
NOW_HELP = (
    "Run as if it were this time: ISO-8601, e.g. 2018-08-24T02:00:00Z (no offset means UTC); given "
    "without a time, the current time."
)
INTERVAL_HELP = "Seconds between rounds when running without --once (default: {setting})."
DRY_RUN_HELP = "Show what the command would do; change nothing."
YES_HELP = "Do not ask for confirmation."
DATE_HELP = "Only the partition of this date"
TABLE_HELP = "Only this table (schema.table)."
RESUME_STATE_HELP = (
    "The load's resume state file: a load some of whose tasks fail keeps the succeeded ones "
    "there, and the same command then runs only the failed ones."
)

Decorator = Callable[[Callable], Callable]

_json_flag = click.option("--json", "as_json", is_flag=True, help=JSON_HELP)


def json_option(command: Callable) -> Callable:
    """`--json`, passed as `as_json`: for a command that prints a report (a listing takes format_option)."""
    return _json_flag(command)


def format_option(command: Callable) -> Callable:
    """`--format table|json|csv`, passed to the command as `fmt`, and `--json`, its shorthand for json."""

    @functools.wraps(command)
    def with_format(*args: Any, **kwargs: Any) -> Any:
        if kwargs.pop("as_json", False):
            if kwargs["fmt"] == "csv":
                raise click.UsageError("--json means --format json; give one of --json and --format csv")
            kwargs["fmt"] = "json"
        return command(*args, **kwargs)

    # functools.wraps shared the wrapped function's option list; this command gets its own (click keeps a
    # function's options in this attribute of it, one no function type declares).
    with_format.__dict__["__click_params__"] = list(getattr(command, "__click_params__", []))
    _json_flag(with_format)
    return click.option(
        "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help=FORMAT_HELP
    )(with_format)


once_option = click.option("--once", is_flag=True, help=ONCE_HELP)

# The value is optional: `--now` alone is the current time (`silt merge --once --now` also makes every
# scheduled job due); parse_now reads it.
now_option = click.option(
    "--now", "now_text", is_flag=False, flag_value="", default=None, metavar="[TIME]", help=NOW_HELP
)


def parse_now(value: str | None):  # a naive UTC datetime or None
    """--now's value as naive UTC; None when --now is not given or given without a time (the current time)."""
    if not value:
        return None
    from siltlake.clock import parse_time

    try:
        return parse_time(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO-8601 time such as 2018-08-24T02:00:00Z", param_hint="--now"
        ) from None


def interval_option(setting: str) -> Decorator:
    """`--interval SECONDS` of a daemon; `setting` is the configuration key it defaults to."""
    return click.option("--interval", type=float, default=None, help=INTERVAL_HELP.format(setting=setting))


dry_run_option = click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)
yes_option = click.option("--yes", is_flag=True, help=YES_HELP)
table_option = click.option("--table", "table_name", default=None, help=TABLE_HELP)


class _Date(click.ParamType):
    """A partition's date, YYYY-MM-DD, as a datetime.date."""

    name = "date"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> dt.date:
        if isinstance(value, dt.date):
            return value
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            self.fail(f"{value!r} is not a date such as 2026-11-20", param, ctx)


def date_option(multiple: bool = False) -> Decorator:
    """`--date YYYY-MM-DD`, passed as `dates` (a tuple) if the option repeats, else as `date` (or None)."""
    return click.option(
        "--date",
        "dates" if multiple else "date",
        type=_Date(),
        multiple=multiple,
        metavar="YYYY-MM-DD",
        help=DATE_HELP + ("; repeat the option for several" if multiple else "") + ".",
    )


def resume_state_option(required: bool = False) -> Decorator:
    return click.option(
        "--resume-state", required=required, default=None, type=click.Path(dir_okay=False), help=RESUME_STATE_HELP
    )


METRICS_PORT_HELP = (
    "Serve Prometheus metrics on http://BIND:PORT/metrics (and, for `silt run`, the dashboard on /); "
    "off by default. 0 picks a free port. See docs/operations.md."
)
BIND_HELP = "The address --metrics-port (or the dashboard) listens on; anything but loopback is said so on start."

metrics_port_option = click.option(
    "--metrics-port", type=click.IntRange(0, 65535), default=None, metavar="PORT", help=METRICS_PORT_HELP
)
bind_option = click.option("--bind", "bind", default="127.0.0.1", show_default=True, metavar="HOST", help=BIND_HELP)

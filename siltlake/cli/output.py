"""How `silt` writes: results on stdout as a table, JSON or CSV; messages, spinners, progress bars and
errors on stderr.

Every listing command takes `--format` (siltlake.cli.options.format_option) and writes through `emit`, so a
pipe gets the same shapes everywhere: JSON is one document (a list of objects, one per row), CSV a header row and
`\\n`-ended lines, and a table is never cut to 80 columns when stdout is not a terminal.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import re
import select
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import click
from rich import box
from rich.console import Console, ConsoleDimensions
from rich.live import Live
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.rule import Rule
from rich.segment import Segment
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

# Wide enough for any line silt prints; a table only takes the width its cells need.
_PIPE_WIDTH = 100_000
# The status a shell reports for a Unix tool stopped by SIGPIPE: its reader (`| head -3`) went away.
CLOSED_OUTPUT = 128 + signal.SIGPIPE


def _reader_gone(stream: Any) -> bool:
    """Whether the stream is a pipe (or socket) whose reading end is closed: poll says POLLERR or POLLHUP."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a test's captured stream: no descriptor
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked for
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def output_closed(exc: BaseException) -> bool:
    """Whether a failure is a write to stdout or stderr after its reader went away, not a pipe or socket of
    the command's own (a worker's, a server's): those stay failures."""
    return (
        isinstance(exc, OSError) and exc.errno == errno.EPIPE and (_reader_gone(sys.stdout) or _reader_gone(sys.stderr))
    )


def quit_closed_output() -> NoReturn:
    """End as a Unix tool whose reader went away: quietly, status 141. The closed streams now write to /dev/null,
    so that nothing said later (and no flush at exit) fails again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        if _reader_gone(stream):
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
    raise SystemExit(CLOSED_OUTPUT)


# What a terminal acts on instead of showing: C0 controls (ESC starts a sequence that can retitle the window,
# recolour, move the cursor or write a hyperlink; BEL ends one; CR overwrites a line), DEL, C1 controls (0x9b
# is CSI to some terminals) and the bidirectional overrides and isolates that reorder what a line shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def visible(text: str, keep: str = "") -> str:
    """The text with each control character but those in `keep` written as its escape (`\\x1b`, `\\n`)."""
    return _CONTROL.sub(lambda found: found[0] if found[0] in keep else repr(found[0])[1:-1], text)


def shown(value: Any) -> str:
    """A data value to put in a message written with Rich markup: one line, its markup shown as written."""
    return escape(visible(str(value)))


class _Console(Console):
    """A terminal's width in a terminal; else (a pipe, a file, a service log) lines as long as they are:
    Rich would cut and wrap them at 80 columns, or at $COLUMNS."""

    @property
    def size(self) -> ConsoleDimensions:
        if self.is_terminal:
            return super().size
        return ConsoleDimensions(_PIPE_WIDTH, super().size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self.width, self.height = new_size  # Rich's own size setter sets just these two

    def render(self, renderable: Any, options: Any = None) -> Iterator[Segment]:
        """Rich's segments with control characters in their text shown as escapes (line breaks kept): the net
        under everything silt writes for people, whatever a message or a cell holds. Rich's own styles and
        cursor moves are added after this, or are control segments."""
        for segment in super().render(renderable, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(visible(segment.text, keep="\n"), segment.style, segment.control)

    def on_broken_pipe(self) -> None:
        """Rich's own handling exits 1, the status of a bug: a closed reader ends the command as it ends others."""
        self.quiet = True
        quit_closed_output()

    def rule(self, *args: Any, **kwargs: Any) -> None:
        """A rule spans a terminal, or 100 columns where lines have no width (a rule has no length of its own)."""
        if self.is_terminal:
            super().rule(*args, **kwargs)
            return
        self.print(Rule(*args, **kwargs), width=100)


console = _Console(stderr=True)  # messages, progress and errors
out = _Console()  # results


def reopen_consoles() -> None:
    """Read again what a console reads once (is it a terminal, its colours, $COLUMNS, $NO_COLOR): a command run
    by the fork server writes to its client's streams, under its client's environment."""
    _Console.__init__(console, stderr=True)
    _Console.__init__(out)


FORMATS = ("table", "json", "csv")


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Column:
    """One column of a listing: `key` names it in JSON and CSV (which carry `value` as it is); the table
    shows `header` and the value as `show` writes it."""

    key: str
    header: str = ""
    show: Callable[[Any], str] = _text
    right: bool = False


def format_size(count: float) -> str:
    """Bytes as people read them: 999 B, 1.2 KB, 3.4 GB."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return ""


def format_count(value: int) -> str:
    return f"{value:,}"


def format_value(value: Any) -> str:
    """A query result's cell: SQL's NULL for a null."""
    return "NULL" if value is None else str(value)


def format_age(seconds: float | None) -> str:
    """A duration in the unit that reads best: 42s, 17m, 3.5h."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def machine_output() -> bool:
    """Whether the running command writes JSON or CSV (`--format json|csv`, `--json`)."""
    context = click.get_current_context(silent=True)
    return context is not None and (context.params.get("fmt") in ("json", "csv") or bool(context.params.get("as_json")))


def grid(
    columns: Sequence[Column], rows: Iterable[Sequence[Any]] = (), title: str | None = None, **options: Any
) -> Table:
    """A Rich table of rows (values in column order). A header or a cell is plain text, never markup (a value holding
    `[bold]` shows as written), with its control characters (line breaks too) as escapes, unless the value is
    a styled rich Text already."""
    options = {"box": box.SIMPLE_HEAD, "show_edge": False, **options}
    table = Table(title=title, **options)
    for column in columns:
        # fold: in a narrow terminal a long value goes on over several lines rather than ending in "…".
        # The header as plain text too (a query's column name may hold `[`): never parsed as markup and emoji codes,
        # whose table Rich would otherwise load for every listing.
        header = Text(visible(column.header or column.key))
        table.add_column(header, justify="right" if column.right else "left", overflow="fold")
    for row in rows:
        table.add_row(
            *(
                value if isinstance(value, Text) else Text(visible(column.show(value)))
                for column, value in zip(columns, row, strict=True)
            )
        )
    return table


def write_json(document: Any) -> None:
    text = json.dumps(document, indent=2, ensure_ascii=False, default=str)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except UnicodeEncodeError:  # a name with a lone surrogate, or a stdout that is not UTF-8: escape as \uXXXX
        text = json.dumps(document, indent=2, default=str)
    sys.stdout.write(text + "\n")


def report(as_json: bool, document: Mapping[str, Any], sentence: str) -> None:
    """What a command that changes something did (or, in a dry run, would do): the sentence on stderr for people,
    or with --json the document on stdout, for scripts."""
    if as_json:
        write_json(document)
    else:
        console.print(sentence, highlight=False, soft_wrap=True, markup=False)


def write_csv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    # Python's csv writes \r\n by default: `grep '^x$'` and `cut` on Unix would see a trailing \r.
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)


def _values(row: Mapping[str, Any] | Sequence[Any], columns: Sequence[Column]) -> list[Any]:
    return [row[column.key] for column in columns] if isinstance(row, Mapping) else list(row)


def emit(
    fmt: str,
    columns: Sequence[Column],
    rows: Iterable[Mapping[str, Any] | Sequence[Any]],
    *,
    empty: str = "",
    title: str | None = None,
) -> None:
    """Write a listing in `fmt`. Rows are mappings by column key or sequences in column order. An empty
    listing is `[]` in JSON, the header alone in CSV, and the `empty` sentence as a table."""
    values = [_values(row, columns) for row in rows]
    if fmt == "json":
        keys = [column.key for column in columns]
        write_json([dict(zip(keys, row, strict=True)) for row in values])
    elif fmt == "csv":
        write_csv([column.key for column in columns], values)
    elif values or not empty:
        out.print(grid(columns, values, title))
    else:
        out.print(empty, highlight=False, soft_wrap=True)


@contextmanager
def activity(text: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr saying what runs now; yields a function that changes the text.

    Nothing shows when stderr is not a terminal or the command writes JSON or CSV (a pipe or a script
    reads the output). Inside another live display (a progress bar) the spinner shows under it."""
    if not console.is_terminal or machine_output():
        yield lambda _text: None
        return
    spinner = Spinner("dots", Text(text, style="cyan"))
    # No redirection: stdout stays the results', untouched by the spinner.
    with Live(
        spinner, console=console, transient=True, refresh_per_second=10, redirect_stdout=False, redirect_stderr=False
    ):
        yield lambda new_text: spinner.update(text=Text(new_text, style="cyan"))


def progress_bar(on: Console | None = None) -> Progress:
    """A bar on stderr (or `on`) counting done of total (staging objects, merge jobs), with the elapsed time."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=on or console,
        transient=False,
    )


def transfer_bar() -> Progress:
    """A bar on stderr over bytes read, with the speed and the elapsed time."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def warm_rendering() -> None:
    """Render a message, a table and a progress bar once, to a terminal and to a pipe, into memory: Rich builds
    its caches (styles, cell widths, regular expressions) on first use, 5 ms of each command the fork server
    runs were it left to the fork."""
    for terminal in (True, False):
        sink = _Console(file=io.StringIO(), force_terminal=terminal, width=100, color_system="truecolor")
        sink.print(f"[bold]{len(FORMATS)}[/bold] formats: {shown(FORMATS)}")
        table = Table("format", "rows", box=box.SIMPLE)
        table.add_row("json", format_count(12_345))
        sink.print(table)
        bar = progress_bar(sink)
        bar.live.auto_refresh = False  # no refresh thread: the fork server forks only while it runs one thread
        with bar:
            bar.update(bar.add_task("objects", total=2), advance=1)

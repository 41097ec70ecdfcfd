"""What every command shares: the deployment it works on (opened on first use), and its failures said in
one line."""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from siltlake.cli.output import activity, console, output_closed, quit_closed_output

# Only what `silt --help` needs is imported here; the commands import the rest (pandas, pyarrow, pyspark,
# SQLAlchemy and Alembic cost about a second of CPU at start-up).
if TYPE_CHECKING:
    from siltlake.deployment import Deployment


class SiltGroup(click.Group):
    """The `silt` group: a prompt answered "no" (or Ctrl-C at it) ends with status 2, not click's "Aborted!" and
    1 (docs/operations.md: 1 is a bug); with `--log-format json`, click's own errors (a bad option, a missing
    argument, a command's usage error) are JSON lines too, with click's exit status."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # now, not at exit: a reader gone by then ends the command as below
            return result
        except OSError as exc:  # click's own handling of a closed stdout exits 1, the status of a bug
            if not output_closed(exc):
                raise
            quit_closed_output()
        except click.exceptions.Abort:
            _declined()
        except click.ClickException as exc:
            if not isinstance(ctx.obj, dict) or ctx.obj.get("log_format") != "json":
                raise
            say_error(exc.format_message(), exc.exit_code)
            raise click.exceptions.Exit(exc.exit_code) from None


def friendly(command: Callable) -> Callable:
    """End a command's failure in one line on stderr, exit 2 if the user can fix it and 1 if it is a bug;
    with --debug (or SILTLAKE_DEBUG=1) the full trace comes first."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (click.ClickException, click.exceptions.Abort, click.exceptions.Exit):
            raise  # usage errors and Ctrl-C at a prompt: click reports them
        except Exception as exc:
            fail(exc)

    return wrapper


DECLINED = 2  # docs/operations.md, "Exit status and errors": a declined confirmation is the user's choice (1: a bug)


def confirm(question: str, yes: bool) -> None:
    """Ask `question` on the terminal unless --yes was given; a "no" (or Ctrl-C) ends the command with status 2
    and nothing changed. Without a terminal to ask on, the command stops at once asking for --yes, never waiting
    on a prompt a script cannot answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        say_error(f"{question} needs a confirmation and there is no terminal to ask on: pass --yes", DECLINED)
        sys.exit(DECLINED)
    try:
        answered = click.confirm(question, default=False, err=True)
    except click.exceptions.Abort:
        answered = False
    if not answered:
        _declined()


def _declined() -> NoReturn:
    console.print("declined: nothing changed", highlight=False)
    sys.exit(DECLINED)


def needs_spark(what: str) -> Callable[[Callable], Callable]:
    """Stop a command that runs Spark jobs before it starts when the install has no PySpark, naming the extra;
    under @friendly, which prints it in one line."""

    def decorate(command: Callable) -> Callable:
        @wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from siltlake.errors import require_spark

            require_spark(what)
            return command(*args, **kwargs)

        return wrapper

    return decorate


def described(exc: Exception, catalog: str | None = None):  # a cli.failures.Failure
    """What to say about a failure; with --debug its full trace goes to stderr first."""
    from siltlake.cli.failures import describe, print_trace
    from siltlake.errors import debug_enabled

    if debug_enabled():
        print_trace(exc)
    return describe(exc, catalog)


def fail(exc: Exception) -> None:
    if output_closed(exc):  # `silt status | head -3`: no error line (and none could be written to a closed pipe)
        quit_closed_output()
    context = click.get_current_context(silent=True)
    state = context.find_root().obj if context is not None else None
    deployment = state.get("deployment") if isinstance(state, dict) else None
    failure = described(exc, repr(deployment.catalog) if deployment is not None else None)
    say_error(failure.message, failure.status)
    sys.exit(failure.status)


def say_error(message: str, status: int) -> None:
    """A command's error line on stderr: `error: ...`, or with `--log-format json` a JSON line as the log's
    (event "command.error", with the message and the exit status), so a log collector parses every line."""
    context = click.get_current_context(silent=True)
    state = context.find_root().obj if context is not None else None
    if isinstance(state, dict) and state.get("log_format") == "json":
        import logging

        from siltlake.logs import event

        event(logging.getLogger("siltlake.cli"), "command.error", logging.ERROR, message=message, status=status)
        return
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def retrying(what: str, to: Console = console) -> Callable[[Exception, float], None]:
    """A daemon's on_error: each failed round in one line (the trace too with --debug); the loop retries."""

    def on_error(exc: Exception, wait: float) -> None:
        to.print(
            f"[red]{what}[/] ({escape(described(exc).message)}); retrying in {wait:.0f}s",
            highlight=False,
            soft_wrap=True,
        )

    return on_error


_imports_open = False  # an `importing` block is open: one nested in it changes nothing


@contextmanager
def importing() -> Iterator[None]:
    """Import the catalog, configuration and SQLAlchemy (and what the command needs with them: sqlglot, DuckDB)
    without the cyclic GC: the first import allocates hundreds of thousands of objects that live as long as the
    process, and the collections it triggers (reclaiming nothing) cost a read-only command such as `silt status`
    about a fifth of its CPU time, `silt sql` more. Once per process (the first block, before the deployment's
    modules are imported); a block nested in it, or after it, changes nothing."""
    global _imports_open
    if _imports_open or "siltlake.deployment" in sys.modules or not gc.isenabled():
        yield
        return
    _imports_open = True
    gc.disable()
    try:
        yield
    finally:
        _imports_open = False
        gc.freeze()  # the modules just imported: later collections need not scan them again
        gc.enable()


@functools.cache
def _command_deployment() -> type[Deployment]:
    """Deployment that says "starting Spark…" on stderr while its session starts (a JVM start takes tens of
    seconds). Built on first use: siltlake.deployment is not imported for `silt --help`."""
    from siltlake.deployment import Deployment

    class CommandDeployment(Deployment):
        def spark(self):  # a SparkSession
            if self._spark is not None:
                return self._spark
            with activity("starting Spark…"):
                return super().spark()

    return CommandDeployment


def deployment_of(context: click.Context, *, ready: bool = True) -> Deployment:
    """The command's deployment, opened on first use. ready: its catalog is checked first (one query) to be
    initialised and at this siltlake's revision, so that no command reads a catalog of another schema (a newer
    siltlake's above all); only `silt init`, which makes it so, passes False."""
    root = context.find_root()
    state = root.obj
    if "deployment" not in state:
        with importing():
            from siltlake.config import load_config

            deployment_class = _command_deployment()
        state["deployment"] = deployment_class.open(load_config(state.get("config")))
        # Commands run in-process (the demos) would otherwise keep catalog connections until a gc cycle.
        root.call_on_close(state["deployment"].close)
        if ready:
            state["deployment"].catalog.check_ready()
    return state["deployment"]

"""What every command shares: the deployment it works on (opened on first use), and its failures said in
one line."""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from rich.markup import escape

from siltlake.cli.output import activity, console

# Only what `silt --help` needs is imported here; the commands import the rest (pandas, pyarrow, pyspark,
# SQLAlchemy and Alembic cost about a second of CPU at start-up).
if TYPE_CHECKING:
    from siltlake.deployment import Deployment


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


def described(exc: Exception, catalog: str | None = None):  # noqa: ANN201 - a cli.failures.Failure
    """What to say about a failure; with --debug its full trace goes to stderr first."""
    from siltlake.cli.failures import describe, print_trace
    from siltlake.errors import debug_enabled

    if debug_enabled():
        print_trace(exc)
    return describe(exc, catalog)


def fail(exc: Exception) -> None:
    context = click.get_current_context(silent=True)
    state = context.find_root().obj if context is not None else None
    deployment = state.get("deployment") if isinstance(state, dict) else None
    failure = described(exc, repr(deployment.catalog) if deployment is not None else None)
    console.print(f"[bold red]error:[/] {escape(failure.message)}", highlight=False, soft_wrap=True)
    sys.exit(failure.status)


def retrying(what: str, to: Console = console) -> Callable[[Exception, float], None]:
    """A daemon's on_error: each failed round in one line (the trace too with --debug); the loop retries."""

    def on_error(exc: Exception, wait: float) -> None:
        to.print(f"[red]{what}[/] ({escape(described(exc).message)}); retrying in {wait:.0f}s", highlight=False,
                 soft_wrap=True)

    return on_error


@contextmanager
def _importing() -> Iterator[None]:
    """Import the catalog, configuration and SQLAlchemy without the cyclic GC: the first import allocates
    hundreds of thousands of objects that live as long as the process, and the collections it triggers
    (reclaiming nothing) cost a read-only command such as `silt status` about a fifth of its CPU time."""
    if "siltlake.deployment" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()  # the modules just imported: later collections need not scan them again
        gc.enable()


@functools.cache
def _command_deployment() -> type[Deployment]:
    """Deployment that says "starting Spark…" on stderr while its session starts (a JVM start takes tens of
    seconds). Built on first use: siltlake.deployment is not imported for `silt --help`."""
    from siltlake.deployment import Deployment

    class CommandDeployment(Deployment):
        def spark(self):  # noqa: ANN201 - a SparkSession
            if self._spark is not None:
                return self._spark
            with activity("starting Spark…"):
                return super().spark()

    return CommandDeployment


def deployment_of(context: click.Context) -> Deployment:
    root = context.find_root()
    state = root.obj
    if "deployment" not in state:
        with _importing():
            from siltlake.config import load_config

            deployment_class = _command_deployment()
        state["deployment"] = deployment_class.open(load_config(state.get("config")))
        # Commands run in-process (the demos) would otherwise keep catalog connections until a gc cycle.
        root.call_on_close(state["deployment"].close)
    return state["deployment"]

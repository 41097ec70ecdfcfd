"""The SparkSession siltlake runs its jobs on."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
import tempfile
import threading
import time
import uuid
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siltlake.config import HiveTargetConfig, SparkConfig
from siltlake.errors import SiltError, debug_enabled, require_spark
from siltlake.workers import balanced_groups

if TYPE_CHECKING:
    from pyspark import RDD
    from pyspark.sql import SparkSession

# siltlake moves data between Spark and Python as Arrow, never as pandas: PySpark's warning about the
# installed pandas version (raised when its Arrow paths load) says nothing a user can act on.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

QUIET = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
}
# Settings no user conf overrides. Variable substitution would replace ${env:VAR}, ${system:prop},
# ${sparkconf:key} and ${spark:key} in SQL text with the host's values before parsing: user SQL would
# read secrets outside the tables (docs/design.md, "What user SQL may reach").
LOCKED = {"spark.sql.variable.substitute": "false"}


def _package_zip() -> str:
    """Zip the siltlake package so executors on other hosts can import the task code."""
    target = Path(tempfile.mkdtemp(prefix="siltlake-pyfiles-")) / "siltlake.zip"
    package = Path(__file__).parent
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in package.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, Path("siltlake") / path.relative_to(package))
    return str(target)


def spark_log_level() -> str:
    """Spark's console log level: errors (with their Java traces) only in debug mode, else nothing, as the
    commands report a failure in one line of their own."""
    return "ERROR" if debug_enabled() else "OFF"


# PySpark's Python loggers that print every captured analysis error, with its whole Java trace, to stderr at ERROR
# as the exception is made: even one siltlake catches and reports in a line of its own (an update's SET value).
QUERY_CONTEXT_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def quiet_query_context_logs() -> None:
    """Silence QUERY_CONTEXT_LOGGERS outside debug mode, as spark_log_level silences Spark's Java log."""
    import logging

    from pyspark.logger import PySparkLogger

    for name in QUERY_CONTEXT_LOGGERS:
        # Made through PySpark (its logger class takes the keyword context PySpark logs with), then held back.
        PySparkLogger.getLogger(name).setLevel(logging.ERROR if debug_enabled() else logging.CRITICAL + 1)


def hive_session_conf(config: HiveTargetConfig) -> dict[str, str]:
    """Spark settings of a Hive-enabled session: an external metastore, else embedded Derby under metastore_dir."""
    conf = {"spark.sql.catalogImplementation": "hive"}
    if config.metastore_uris:
        conf["spark.hadoop.hive.metastore.uris"] = config.metastore_uris
        return conf
    home = Path(config.metastore_dir).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    conf.update(
        {
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true"
            ),
            "spark.sql.warehouse.dir": (home / "warehouse").as_uri(),
            # derby.log next to the database instead of in whatever directory silt runs in.
            "spark.driver.extraJavaOptions": (
                f"-Dderby.system.home={home} -Dderby.stream.error.file={home / 'derby.log'}"
            ),
        }
    )
    return conf


def spark_session(config: SparkConfig, extra: dict[str, str] | None = None) -> SparkSession:
    """Get or create the session for the configured master, with quiet logs and no UI."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    require_spark("this operation")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(config.master).appName(config.app_name)
    log_level = spark_log_level()
    log_config = (
        f"-Dlog4j2.configurationFile={Path(__file__).with_name('log4j2.properties').as_uri()} "
        f"-Dsiltlake.spark.log.level={log_level}"
    )
    settings = {**QUIET, **config.conf, **(extra or {}), **LOCKED}
    # Java options add up: the log configuration stays whatever the user's conf or `extra` (Derby's) pass.
    java_options = "spark.driver.extraJavaOptions"
    settings[java_options] = " ".join(
        option for option in (log_config, config.conf.get(java_options), (extra or {}).get(java_options)) if option
    )
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = lock_session(builder.getOrCreate())
    context = session.sparkContext
    context.setLogLevel(log_level)
    quiet_query_context_logs()
    # Once per context: a later session of the same process shares it, and Spark refuses a second
    # file named siltlake.zip.
    master = context.master
    assert master is not None  # a started context has its master
    if not master.startswith("local") and not getattr(context, "_siltlake_shipped", False):
        context.addPyFile(_package_zip())
        # A mark of siltlake's own on pyspark's object, which does not declare it.
        context._siltlake_shipped = True  # type: ignore[attr-defined]
    return session


def lock_session(session: SparkSession) -> SparkSession:
    """Apply LOCKED to a session (runtime settings: a session made elsewhere and handed over gets them too)."""
    for key, value in LOCKED.items():
        session.conf.set(key, value)
    return session


def task_count(weights: list[int], cores: int, tasks_per_core: int, task_weight: int | None = None) -> int:
    """How many tasks a stage packs its items into: tasks_per_core per core to balance uneven items, but
    only as many rounds per core as there is work for (`task_weight` at least per task), and never fewer
    tasks than cores while there are items for them."""
    rounds = tasks_per_core
    if task_weight:
        rounds = max(1, min(tasks_per_core, -(-sum(weights) // (cores * task_weight))))
    return cores * rounds


def run_tasks(
    spark: SparkSession,
    function: Callable[[Any], Any],
    items: list[Any],
    weights: list[int] | None = None,
    tasks_per_core: int = 4,
    on_progress: Callable[[int], None] | None = None,
    tasks: int | None = None,
    task_weight: int | None = None,
) -> list[Any]:
    """Run function over items as one Spark stage and return the results in item order.

    Items are packed into a few size-balanced tasks per core (task_count): a Spark task costs tens of
    milliseconds however little it does, which would dominate many small staging objects.
    `tasks` overrides the count (merge runs one task per job plan).
    """
    if not items:
        return []
    context = spark.sparkContext
    indexed = list(enumerate(items))
    weights = weights or [1] * len(items)
    groups = balanced_groups(
        indexed, weights, tasks or task_count(weights, context.defaultParallelism, tasks_per_core, task_weight)
    )
    rdd: RDD = context.parallelize(groups, len(groups)).flatMap(
        lambda group: [(index, function(item)) for index, item in group]
    )
    group_id = f"siltlake-{uuid.uuid4().hex}"
    outcome: dict[str, Any] = {}

    def collect() -> None:
        context.setJobGroup(group_id, "siltlake tasks", interruptOnCancel=True)
        try:
            outcome["results"] = rdd.collect()
        except BaseException as exc:  # re-raised in the calling thread
            outcome["error"] = exc

    worker = threading.Thread(target=collect, daemon=True)
    worker.start()
    tracker = context.statusTracker()
    smallest_first = sorted(len(group) for group in groups)
    reported = 0
    try:
        while worker.is_alive():
            worker.join(0.2)
            if on_progress is None:
                continue
            completed_tasks = 0
            for job_id in tracker.getJobIdsForGroup(group_id):
                job = tracker.getJobInfo(job_id)
                for stage_id in job.stageIds if job else []:
                    stage = tracker.getStageInfo(stage_id)
                    completed_tasks += stage.numCompletedTasks if stage else 0
            # Spark tells how many tasks finished, not which: count the smallest ones (never over-report).
            done = sum(smallest_first[:completed_tasks])
            if done > reported:
                on_progress(done - reported)
                reported = done
    except KeyboardInterrupt:
        context.cancelJobGroup(group_id)
        raise
    if "error" in outcome:
        raise outcome["error"]
    if on_progress is not None and len(items) > reported:
        on_progress(len(items) - reported)
    return [result for _, result in sorted(outcome["results"], key=lambda pair: pair[0])]


# --- Time bounds on user SQL (docs/design.md, "Hostile input": query bounds) ------------------------------


class QueryBound:
    """A deadline on the SQL one command runs. Each engine run inside it registers how to stop itself (a DuckDB
    connection's interrupt, cancelling a Spark job tag); past the deadline those are called, again every half
    second, so that a job started after it stops too."""

    def __init__(self, seconds: int, setting: str, what: str) -> None:
        self.seconds, self.setting, self.what = seconds, setting, what
        self.expired = threading.Event()
        self.tag = f"siltlake-bound-{uuid.uuid4().hex}"
        self.sessions: dict[int, Callable[[], object]] = {}  # tagged Spark sessions -> how to remove the tag
        self._stops: dict[int, Callable[[], object]] = {}
        self._done = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, args=(time.monotonic() + seconds,), daemon=True, name="siltlake-query-bound"
        )

    def _watch(self, deadline: float) -> None:
        if self._done.wait(max(0.0, deadline - time.monotonic())):
            return
        self.expired.set()
        while not self._done.is_set():
            for stop in list(self._stops.values()):
                with contextlib.suppress(Exception):  # an engine that ended meanwhile: nothing left to stop
                    stop()
            self._done.wait(0.5)

    def start(self) -> None:
        self._watcher.start()

    def finish(self) -> None:
        """Stop watching, and take the bound's tag off the sessions that carry it (in the thread that added it)."""
        self._done.set()
        self._watcher.join()
        for remove in self.sessions.values():
            with contextlib.suppress(Exception):  # a session stopped inside (a Spark Connect client's)
                remove()

    def tag_session(self, key: int, stop: Callable[[], object], remove: Callable[[], object]) -> None:
        self.sessions[key] = remove
        self._stops[key] = stop

    @contextmanager
    def stopping(self, stop: Callable[[], object]) -> Iterator[None]:
        """While inside, `stop` is called once the bound is past."""
        key = id(stop)
        self._stops[key] = stop
        try:
            yield
        finally:
            self._stops.pop(key, None)

    def breach(self) -> SiltError:
        return SiltError(
            f"{self.what} was stopped: it ran past {self.setting} ({self.seconds} s); nothing was "
            f"written. Raise {self.setting} (seconds, or e.g. '2h'; 0: no bound) to let it run longer"
        )


_BOUND: ContextVar[QueryBound | None] = ContextVar("siltlake_query_bound", default=None)


def current_bound() -> QueryBound | None:
    return _BOUND.get()


@contextmanager
def time_bound(seconds: int, setting: str, what: str) -> Iterator[QueryBound | None]:
    """Stop the SQL run inside after `seconds` (0: never): whatever it raises then becomes one error naming the
    bound and `setting`. Spark sessions are tagged as this thread gets them (bound_session)."""
    if seconds <= 0 or _BOUND.get() is not None:  # an enclosing bound holds
        yield _BOUND.get()
        return
    bound = QueryBound(seconds, setting, what)
    token = _BOUND.set(bound)
    bound.start()
    try:
        yield bound
    except Exception as exc:
        if bound.expired.is_set() and not isinstance(exc, SiltError):
            raise bound.breach() from None
        raise
    finally:
        bound.finish()
        _BOUND.reset(token)


def bound_session(spark: SparkSession) -> SparkSession:
    """Tag the jobs this thread starts on `spark` with the current time bound (if any), which cancels them when
    it is past: a job tag on a local session, an operation tag on a Spark Connect one."""
    bound = _BOUND.get()
    if bound is None or id(spark) in bound.sessions:
        return spark
    stop: Callable[[], object]  # what these return is not used
    remove: Callable[[], object]
    if is_remote(spark):
        spark.addTag(bound.tag)
        stop, remove = (lambda: spark.interruptTag(bound.tag)), (lambda: spark.removeTag(bound.tag))
    else:
        context = spark.sparkContext
        context.addJobTag(bound.tag)
        context.setInterruptOnCancel(True)  # the tasks too, not only the job (this thread's jobs)
        stop, remove = (lambda: context.cancelJobsWithTag(bound.tag)), (lambda: context.removeJobTag(bound.tag))
    bound.tag_session(id(spark), stop, remove)
    return spark


# --- Spark Connect: a warm session for `silt sql --engine spark` and notebooks -----------------------------


def is_remote(spark: SparkSession) -> bool:
    """Whether the session is a Spark Connect client's: no JVM in this process, no SparkContext, no py4j."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def jvm(spark: SparkSession) -> Any:
    """The py4j view of a classic session's JVM. Any: py4j resolves Java packages, classes and members by attribute
    at run time, so nothing reached through it has a type to check. PySpark types the view Optional because a stopped
    context clears it; a session siltlake still holds has it."""
    view = spark._jvm
    if view is None:
        raise SiltError("the Spark session's context has stopped: it has no JVM to call")
    return view


# Spark reads the token from its configuration (or this variable in the JVM's environment) as the service starts,
# and refuses every call without it (gRPC UNAUTHENTICATED); PySpark's client sends it from the sc:// URL or this
# variable.
TOKEN_VARIABLE = "SPARK_CONNECT_AUTHENTICATE_TOKEN"
TOKEN_SETTING = "spark.connect.authenticate.token"
# siltlake's clients pass the token in the sc:// URL (";token=..."), whose parameters cannot hold ";" or "=".
_URL_SAFE_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,}")


def start_connect_server(spark: SparkSession, config: SparkConfig) -> str:
    """Serve Spark Connect from this session's JVM at spark.connect; returns the address clients use.

    Clients must send a token: $SPARK_CONNECT_AUTHENTICATE_TOKEN when set, else a new random one; either is written
    to spark.connect_token_file (mode 0600, for siltlake's clients run as the same user). Each client gets a
    session of its own (temp views, settings) over this SparkContext, so its queries run on executors already up.
    The service reads its address and token from the context's configuration as it starts."""
    from py4j.protocol import Py4JJavaError

    from siltlake.errors import SiltError

    token = os.environ.get(TOKEN_VARIABLE) or secrets.token_urlsafe(32)
    if not _URL_SAFE_TOKEN.fullmatch(token):
        raise SiltError(
            f"${TOKEN_VARIABLE} must be 16 or more letters, digits, '-', '_', '.' or '~' (siltlake's "
            "clients send it in the sc:// URL), such as what "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'` prints"
        )
    write_token_file(Path(config.connect_token_file), token)
    host, port = config.connect_address
    context = spark.sparkContext
    context._conf.set("spark.connect.grpc.binding.address", host)  # the JVM context's own SparkConf, not a copy
    context._conf.set("spark.connect.grpc.binding.port", str(port))
    context._conf.set(TOKEN_SETTING, token)
    try:
        jvm(spark).org.apache.spark.sql.connect.service.SparkConnectService.start(context._jsc.sc())
    except Py4JJavaError as exc:
        cause = str(exc.java_exception.toString())
        raise SiltError(f"cannot serve Spark Connect at {config.connect} (spark.connect): {cause}") from None
    return connect_url(host, port)


def write_token_file(path: Path, token: str) -> None:
    """Write the token readable by this user only: created 0600 beside the file, then renamed over it, so no reader
    ever sees a partial token or a file another user can read."""
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(token + "\n")
    os.replace(temporary, path)


def connect_token(config: SparkConfig) -> str | None:
    """The token a client of spark.connect sends: $SPARK_CONNECT_AUTHENTICATE_TOKEN, else the one `silt run` wrote to
    spark.connect_token_file, else None (the server will refuse the client)."""
    token = os.environ.get(TOKEN_VARIABLE)
    if token:
        return token
    try:
        return Path(config.connect_token_file).expanduser().read_text().strip() or None
    except (OSError, UnicodeDecodeError):  # none written, or not this user's to read
        return None


def stop_connect_server(spark: SparkSession) -> None:
    """Stop the Spark Connect service start_connect_server started (its clients' sessions end)."""
    view = jvm(spark)
    nothing = view.scala.Option.apply(None)
    view.org.apache.spark.sql.connect.service.SparkConnectService.stop(nothing, nothing)


def connect_url(host: str, port: int, token: str | None = None) -> str:
    """The sc:// URL of a server, with the token a client sends if given. A loopback server is named localhost:
    the client then sends its token over the loopback connection without TLS, which it does for no other name."""
    from siltlake.config import is_loopback

    shown = "localhost" if is_loopback(host) else f"[{host}]" if ":" in host else host
    return f"sc://{shown}:{port}" + (f"/;token={token}" if token else "")


def connect_session(config: SparkConfig) -> SparkSession | None:
    """A session of the Spark Connect server at spark.connect, with the server's token (connect_token) and LOCKED
    applied; None when nothing listens there (or this Python lacks Spark Connect's client packages). A server
    that refuses the token is a SiltError saying where the token comes from."""
    import socket

    from siltlake.errors import SiltError

    host, port = config.connect_address
    try:
        socket.create_connection((host, port), timeout=1).close()
        import pyspark.sql.connect.session  # noqa: F401 - raises ImportError without grpcio & co.
        from pyspark.errors.exceptions.connect import SparkConnectGrpcException
        from pyspark.sql import SparkSession
    except (OSError, ImportError):
        return None
    # PySpark's own builder (not the Connect module's): it also switches the module-level helpers (type
    # parsing) to the remote session.
    session = SparkSession.builder.remote(connect_url(host, port, connect_token(config))).getOrCreate()
    quiet_query_context_logs()
    try:
        return lock_session(session)  # the first call to the server
    except SparkConnectGrpcException as exc:
        # Closed at once: an open client's clean-up call at exit can hang the process on a refused channel.
        session.stop()
        if "UNAUTHENTICATED" not in str(exc):
            raise
        raise SiltError(
            f"the Spark Connect server at {config.connect} (spark.connect) refused this client's token: "
            f"${TOKEN_VARIABLE} must hold the server's, or spark.connect_token_file "
            f"({config.connect_token_file}) must be readable here and written by the running `silt run`"
        ) from None

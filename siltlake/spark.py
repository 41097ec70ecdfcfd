"""The SparkSession siltlake runs its jobs on."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import uuid
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from siltlake.config import HiveTargetConfig, SparkConfig
from siltlake.errors import debug_enabled, require_spark
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


def hive_session_conf(config: HiveTargetConfig) -> dict[str, str]:
    """Spark settings of a Hive-enabled session: an external metastore, else embedded Derby under metastore_dir."""
    conf = {"spark.sql.catalogImplementation": "hive"}
    if config.metastore_uris:
        conf["spark.hadoop.hive.metastore.uris"] = config.metastore_uris
        return conf
    home = Path(config.metastore_dir).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    conf.update({
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={home / 'metastore_db'};create=true",
        "spark.sql.warehouse.dir": (home / "warehouse").as_uri(),
        # derby.log next to the database instead of in whatever directory silt runs in.
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={home} -Dderby.stream.error.file={home / 'derby.log'}",
    })
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
    log_config = (f"-Dlog4j2.configurationFile={Path(__file__).with_name('log4j2.properties').as_uri()} "
                  f"-Dsiltlake.spark.log.level={log_level}")
    settings = {**QUIET, **config.conf, **(extra or {}), **LOCKED}
    # Java options add up: the log configuration stays whatever the user's conf or `extra` (Derby's) pass.
    java_options = "spark.driver.extraJavaOptions"
    settings[java_options] = " ".join(
        option for option in (log_config, config.conf.get(java_options), (extra or {}).get(java_options)) if option)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = lock_session(builder.getOrCreate())
    context = session.sparkContext
    context.setLogLevel(log_level)
    # Once per context: a later session of the same process shares it, and Spark refuses a second
    # file named siltlake.zip.
    if not context.master.startswith("local") and not getattr(context, "_siltlake_shipped", False):
        context.addPyFile(_package_zip())
        context._siltlake_shipped = True
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


def run_tasks(spark: SparkSession, function: Callable[[Any], Any], items: list[Any],
              weights: list[int] | None = None, tasks_per_core: int = 4,
              on_progress: Callable[[int], None] | None = None, tasks: int | None = None,
              task_weight: int | None = None) -> list[Any]:
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
    groups = balanced_groups(indexed, weights, tasks or task_count(weights, context.defaultParallelism,
                                                                   tasks_per_core, task_weight))
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


# --- Spark Connect: a warm session for `silt sql --engine spark` and notebooks -----------------------------

def is_remote(spark: SparkSession) -> bool:
    """Whether the session is a Spark Connect client's: no JVM in this process, no SparkContext, no py4j."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def start_connect_server(spark: SparkSession, config: SparkConfig) -> str:
    """Serve Spark Connect from this session's JVM at spark.connect; returns the address clients use.

    Each client gets a session of its own (temp views, settings) over this SparkContext, so its queries run
    on executors already up. The service reads its address from the context's configuration as it starts."""
    from py4j.protocol import Py4JJavaError

    from siltlake.errors import SiltError

    host, port = config.connect_address
    context = spark.sparkContext
    context._conf.set("spark.connect.grpc.binding.address", host)  # the JVM context's own SparkConf, not a copy
    context._conf.set("spark.connect.grpc.binding.port", str(port))
    try:
        spark._jvm.org.apache.spark.sql.connect.service.SparkConnectService.start(context._jsc.sc())
    except Py4JJavaError as exc:
        cause = str(exc.java_exception.toString())
        raise SiltError(f"cannot serve Spark Connect at {config.connect} (spark.connect): {cause}") from None
    return connect_url(host, port)


def stop_connect_server(spark: SparkSession) -> None:
    """Stop the Spark Connect service start_connect_server started (its clients' sessions end)."""
    jvm = spark._jvm
    nothing = jvm.scala.Option.apply(None)
    jvm.org.apache.spark.sql.connect.service.SparkConnectService.stop(nothing, nothing)


def connect_url(host: str, port: int) -> str:
    """The sc:// URL of a server. A loopback server is named localhost: the client then sends a token
    ($SPARK_CONNECT_AUTHENTICATE_TOKEN) over the loopback connection without TLS, which it does for no other name."""
    from siltlake.config import is_loopback

    shown = "localhost" if is_loopback(host) else f"[{host}]" if ":" in host else host
    return f"sc://{shown}:{port}"


def connect_session(config: SparkConfig) -> SparkSession | None:
    """A session of the Spark Connect server at spark.connect, with LOCKED applied; None when nothing listens
    there (or this Python lacks Spark Connect's client packages)."""
    import socket

    host, port = config.connect_address
    try:
        socket.create_connection((host, port), timeout=1).close()
        import pyspark.sql.connect.session  # noqa: F401 - raises ImportError without grpcio & co.
        from pyspark.sql import SparkSession
    except (OSError, ImportError):
        return None
    # PySpark's own builder (not the Connect module's): it also switches the module-level helpers (type
    # parsing) to the remote session.
    return lock_session(SparkSession.builder.remote(connect_url(host, port)).getOrCreate())

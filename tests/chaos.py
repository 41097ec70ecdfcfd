"""Chaos harness (tests/test_chaos.py in CI, `make chaos` for hundreds of kills).

A shipper writes staging objects for two tables over three UTC days (yesterday and the day before are
closed by the first publish run, so their later records become delayed objects and the days switch) and
re-sends a tenth of them under new names and appends some in place, split mid-line, to one long-lived file
per table, rotated now and then as logrotate does (`create` and `copytruncate` in turn; each appended line must be
read exactly once, through the renames and copies); the tables are keyed on record_id, so each record
shows once,
while `silt stream`, two `silt merge` and `silt publish` daemons run and `silt reap` runs over and over.
A killer SIGKILLs a randomly chosen process (its whole session: driver, JVM, Python workers) after a
random delay or once it reaches a phase seen in the catalog or its log, and restarts it. Then everything
drains (stream, merge and publish until idle, one reap) and the invariants are checked: exactly-once
through every reader before the drain's merges (merge-on-read of re-sent rows) and after them.
"""

from __future__ import annotations

import collections
import datetime as dt
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from siltlake.clock import utcnow
from siltlake.config import load_config
from siltlake.deployment import Deployment
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.reap import reap_once
from siltlake.storage.keys import symlink_key
from siltlake.storage.manifests import read_manifest
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .chaos_checks import (
    current_objects,
    current_record_ids,
    delayed_record_ids,
    exactly_once,
    explain_lost,
    reader_record_ids,
)
from .draining import rounds_until_quiet
from .processes import (
    SHIPPED_TABLE,
    Shipper,
    SiltProcess,
    delivered_records,
    deliveries_of,
    held_jobs,
    kill_session,
    owner_pid,
    pid_alive,
    positions_of,
    session_members,
    silt_env,
    successes,
)
from .test_reap_property import rows_of, version_objects

TABLES = ("chaos.events_a", "chaos.events_b")
JOB_TIMEOUT = 4
# Reap runs for real (no --now in the future: that would call a writer's object in flight an orphan).
# Retention of seconds expires superseded versions during the run; the grace must exceed the longest
# write-to-commit time of a stream wave or merge stage on a loaded machine, or reap deletes an object
# its writer is about to commit (the same rule as the 3-day default, scaled down).
REAP_ARGS = ("reap", "--retention", "3s", "--grace", "90s", "--force")
STREAM_REPORT = re.compile(r"live \+ (\d+) delayed small objects")
NAMES = {"stream": 2, "merge1": 1, "merge2": 1, "publish": 3, "reap": 3}  # cards per deck of kills
# A restarted Spark daemon is spared (but for a few kills while its JVM starts) until it has committed
# once or this long has passed: killed at every start it would never work, and the kills would land in
# JVM start-up only.
SPARE_SECONDS = 120
RESEND = 0.10  # share of the shipper's chunks sent again under a new name (a quarter of those twice)
APPEND = 0.15  # share of the shipper's chunks appended in place to one file per table, split mid-line
ROTATE = 0.25  # share of those appends after which the file is rotated (logrotate create and copytruncate in turn)


@dataclass
class Kill:
    kind: str
    name: str
    phase: str
    alive_seconds: float
    held_jobs: int = 0


@dataclass
class ChaosReport:
    seed: int
    kills: list[Kill] = field(default_factory=list)
    restarts: int = 0
    reap_runs: int = 0
    objects: int = 0
    records: int = 0
    orphan_claims: int = 0  # jobs still claimed by killed workers when the chaos stopped
    seconds: float = 0.0
    drain_rounds: int = 0
    drain_seconds: float = 0.0
    delayed_objects: int = 0  # made by the stream, counted from its reports (reap deletes merged ones)
    resent_objects: int = 0  # staging objects the shipper wrote again under a new name
    rotations: dict[str, int] = field(default_factory=dict)  # appended files rotated, per logrotate mode

    def counts(self) -> str:
        by_kind = collections.Counter(k.kind for k in self.kills)
        by_phase = collections.Counter(f"{k.kind}: {k.phase}" for k in self.kills)
        lines = [
            f"seed {self.seed}: {len(self.kills)} kills in {self.seconds:.0f} s, {self.restarts} restarts, "
            f"{self.reap_runs} reap runs finished, {self.objects} staging objects (and {self.resent_objects} "
            f"re-sent), {self.records} records, appended files rotated {self.rotations}, "
            f"{self.delayed_objects} delayed small objects, {self.orphan_claims} claims of dead workers left "
            f"for the drain, {self.drain_rounds} drain rounds "
            f"({self.drain_seconds:.0f} s)",
            "kills per kind: " + ", ".join(f"{kind} {count}" for kind, count in sorted(by_kind.items())),
        ]
        lines += [f"  {count:4d}  {phase}" for phase, count in sorted(by_phase.items())]
        return "\n".join(lines)


def chaos_env(tmp_path: Path, url: str) -> dict[str, str]:
    return silt_env(
        tmp_path,
        url,
        # Small waves: a stream commits every few objects, so kills fall between and inside many commits.
        # Files appended in place settle for a second (the shipper finishes a split line within 50 ms).
        stream={"poll_interval": 1, "objects_per_wave": 16, "settle_time": 1, "settle_limit": 3},
        # Kills are not the job's fault: a high attempt limit keeps killed jobs from parking.
        merge={
            "slots": 2,
            "poll_interval": 1,
            "job_timeout": JOB_TIMEOUT,
            "heartbeat_interval": 1,
            "retry_backoff": 1,
            "max_attempts": 1000,
        },
        spark={"conf": {"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "1"}},
    )


def create_tables(deployment: Deployment, **options: object) -> None:
    """TABLES; by default with small batches and objects, so jobs continue and ranges roll over in a short run
    (the chaos run keys them on record_id: a keyed partition keeps one range)."""
    for name in TABLES:
        deployment.catalog.tables.create(
            TableDef.from_mapping(
                {
                    **SHIPPED_TABLE,
                    "name": name.split(".")[1],
                    "merge_batch_size": 6,
                    "merged_object_size": 40_000,
                    **options,
                }
            )
        )


class Chaos:
    """The daemons, the shipper and the killer of one run."""

    def __init__(self, tmp_path: Path, url: str, seed: int, log: Callable[[str], None] = print) -> None:
        self.tmp_path = tmp_path
        self.logs = tmp_path / "logs"
        self.logs.mkdir(exist_ok=True)
        self.env = chaos_env(tmp_path, url)
        self.deployment = Deployment(load_config(environ=self.env))
        self.deployment.init()
        create_tables(self.deployment, primary_key=["record_id"])  # re-sent chunks show once
        self.rng = random.Random(seed)
        self.report = ChaosReport(seed)
        self.log = log
        today = utcnow().date()
        self.shipper = Shipper(
            tmp_path / "staging",
            TABLES,
            [today - dt.timedelta(days=d) for d in (2, 1, 0)],
            rate=3.0,
            records=(5, 30),
            seed=seed,
            resend=RESEND,
            append=APPEND,
            rotate=ROTATE,
        )
        self.processes: dict[str, SiltProcess] = {}
        self.everything: list[SiltProcess] = []
        self.started = time.monotonic()
        self.reap_due = 0.0
        self.killed: set[SiltProcess] = set()
        self.marks: dict[SiltProcess, int] = {}
        self.deck: list[tuple[str, bool]] = []

    # --- processes ---

    def start(self, name: str) -> SiltProcess:
        args = {
            "stream": ("stream",),
            "merge1": ("merge",),
            "merge2": ("merge",),
            "publish": ("publish", "--interval", "0.2"),
            "reap": REAP_ARGS,
        }[name]
        process = SiltProcess(self.logs, f"{name}-{len(self.everything):04d}", self.env, *args)
        self.processes[name] = process
        self.everything.append(process)
        self.marks[process] = self.progress(name)
        return process

    def progress(self, name: str) -> int:
        """What grows when the daemon works: small objects for the stream, merge commits for a merge."""
        if name == "stream":
            return self.deployment.catalog.partitions.max_small_object_id()
        return successes(self.deployment) if name.startswith("merge") else 0

    def spared(self, name: str) -> bool:
        process = self.processes.get(name)
        if process is None or not process.alive() or name not in ("stream", "merge1", "merge2"):
            return False
        young = time.monotonic() - process.started < SPARE_SECONDS
        return young and self.progress(name) <= self.marks[process]

    def tend(self) -> None:
        """Fail on a daemon that exited by itself; start the next reap a moment after the last one ended."""
        for name, process in self.processes.items():
            if process.alive() or process in self.killed:
                continue
            if name != "reap" or process.proc.returncode != 0:
                raise AssertionError(f"{process.name} exited with {process.proc.returncode}\n{process.tail()}")
        reap = self.processes.get("reap")
        if reap is None or reap.alive():
            return
        if self.reap_due == 0.0:
            self.report.reap_runs += reap not in self.killed
            self.reap_due = time.monotonic() + self.rng.uniform(0.5, 3.0)
        elif time.monotonic() >= self.reap_due:
            self.reap_due = 0.0
            self.start("reap")

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.tend()
            time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def wait_for(self, condition: Callable[[], object], timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if condition():
                return True
            self.tend()
            time.sleep(0.05)
        return False

    def stop_all(self) -> None:
        for process in self.everything:
            kill_session(process.pid)
            process.proc.wait(timeout=30)

    # --- the killer ---

    def has_jvm(self, process: SiltProcess) -> bool:
        return any(
            Path(f"/proc/{pid}/comm").read_text().strip() == "java"
            for pid in session_members(process.pid)
            if Path(f"/proc/{pid}/comm").exists()
        )

    def phases(self, kind: str, process: SiltProcess) -> dict[str, Callable[[], bool]]:
        """Phase name -> wait for it (True once reached); the kill follows a short random delay."""
        catalog = self.deployment.catalog
        if kind in ("stream", "merge") and not self.has_jvm(process):
            # Restarted a moment ago: its JVM is starting (a merge may already hold the jobs it claimed).
            at = process.started + self.rng.uniform(0.5, 6.0)
            return {"while Spark starts": lambda: self.wait_for(lambda: time.monotonic() > at, 7)}
        if kind == "stream":
            top = catalog.partitions.max_small_object_id()
            return {
                "in a wave (Spark running, objects pending)": lambda: self.wait_for(
                    lambda: self.has_jvm(process) and catalog.staging.pending(1), 10
                ),
                "right after a commit": lambda: self.wait_for(
                    lambda: catalog.partitions.max_small_object_id() > top, 10
                ),
            }
        if kind == "merge":

            def holding() -> set[int]:
                return {r.id for r in held_jobs(self.deployment) if owner_pid(r.owner) == process.pid}

            def after_own_commit() -> bool:
                """A job it held is gone from the queue and the log has a new commit: its own commit."""
                claimed: set[int] = set()
                done = successes(self.deployment)
                return self.wait_for(
                    lambda: claimed.update(holding()) or (claimed - holding() and successes(self.deployment) > done), 10
                )

            return {
                "holding claimed jobs": lambda: self.wait_for(holding, 10),
                "right after its commit": after_own_commit,
            }
        if kind == "publish":
            runs = process.log().count("publish:")
            return {"after a run (next run)": lambda: self.wait_for(lambda: process.log().count("publish:") > runs, 10)}
        return {"catalog read or deleting": lambda: self.wait_for(lambda: time.monotonic() - process.started > 1.0, 5)}

    def next_victim(self) -> str:
        """The next card of a shuffled deck (each process its share of the kills); a spared daemon's card
        waits for a later turn, and when only spared ones are left the killer waits for one to work."""
        while True:
            if not self.deck:
                # A few cards may kill a spared daemon anyway: kills during JVM start-up and the first round.
                self.deck = [(name, self.rng.random() < 0.15) for name, cards in NAMES.items() for _ in range(cards)]
                self.rng.shuffle(self.deck)
            for index, (name, anyway) in enumerate(self.deck):
                if anyway or not self.spared(name):
                    return self.deck.pop(index)[0]
            self.sleep(0.5)

    def kill_one(self) -> None:
        name = self.next_victim()
        kind = name.rstrip("12")
        process = self.processes.get(name)
        if process is None or not process.alive():
            process = self.start(name)
        options = self.phases(kind, process)
        if self.rng.random() < 0.3:
            phase = "random moment"
            self.sleep(self.rng.uniform(0.2, 3.0))
        else:
            phase = self.rng.choice(list(options))
            if not options[phase]():
                phase += " (not reached: timed out)"
            self.sleep(self.rng.uniform(0.0, 0.3 if "commit" not in phase else 0.05))
        if not process.alive():  # a reap that finished meanwhile: nothing to kill
            self.tend()
            return
        held = sum(owner_pid(r.owner) == process.pid for r in held_jobs(self.deployment)) if kind == "merge" else 0
        self.killed.add(process)
        process.kill()
        self.report.kills.append(Kill(kind, process.name, phase, time.monotonic() - process.started, held))
        if kind != "reap":
            self.start(name)
            self.report.restarts += 1
        self.log(
            f"[{time.monotonic() - self.started:6.1f}s] killed {process.name} ({phase}) after "
            f"{self.report.kills[-1].alive_seconds:.1f}s" + (f", holding {held} jobs" if held else "")
        )

    def run(self, kills: int) -> ChaosReport:
        try:
            for name in ("stream", "merge1", "merge2", "publish", "reap"):
                self.start(name)
            self.shipper.start()
            while len(self.report.kills) < kills:
                self.sleep(self.rng.uniform(0.0, 0.5))
                self.kill_one()
            self.shipper.stop()
            held = held_jobs(self.deployment)
            self.report.orphan_claims = sum(not pid_alive(owner_pid(r.owner)) for r in held)
        finally:
            self.shipper.stop()
            self.stop_all()
        # Whether the daemons merged every re-sent copy of a live day before they died is timing; one more
        # pair per table, written once they are dead, keeps a merge-on-read case for check_before_merge.
        for name in TABLES:
            self.shipper.ship_one(name, self.shipper.dates[-1], resent_now=True)
        self.report.seconds = time.monotonic() - self.started
        self.report.objects = self.shipper.objects
        self.report.resent_objects = self.shipper.resent
        self.report.rotations = dict(self.shipper.rotations)
        self.report.records = self.shipper.total()
        self.report.delayed_objects = sum(
            int(m.group(1))
            for p in self.everything
            if p.name.startswith("stream")
            for m in STREAM_REPORT.finditer(p.log())
        )
        return self.report

    # --- drain and check ---

    def check_before_merge(self, spark) -> dict[str, int]:  # a SparkSession
        """Every daemon is dead: stream every staging object in and publish, but merge nothing; then every
        reader shows exactly the records the current state's objects hold, each once, although re-sent rows
        still lie in them twice or three times (merge-on-read). Records of delayed objects not merged yet
        are not shown (by design: a switched partition shows its merged version); they must be in one."""
        deployment = self.deployment
        deployment.use_spark(spark)
        # The drain lists the root whole each round, as the periodic full listing does within
        # stream.full_listing_interval: a file appended to after a whole delivery, in a directory that got nothing
        # new since, is seen growing by no cursor walk and no watch (docs/design.md, "Finding growth").
        deployment.config.stream.full_listing_interval = 0
        for streamed in rounds_until_quiet(deployment, settle_wait=True):
            assert not streamed.failed and not streamed.rewritten, (streamed.failed, streamed.rewritten)
            self.report.delayed_objects += streamed.delayed_objects
        publish_once(deployment)
        checked = collections.Counter()
        # Each line appended in place was read once: the deliveries of the appended files (split mid-line,
        # caught half written) read exactly the lines written, none twice, none half.
        appended = sum(len(ids) for ids in self.shipper.appended.values())
        delivered = delivered_records(deployment, "/appending-")
        assert delivered == (appended, 0), (
            f"{appended} lines appended, (read, bad) {delivered}; rotated "
            f"{self.shipper.rotations}; deliveries "
            f"{deliveries_of(deployment, '/appending-')}; positions (name, state, identity, consumed, read, "
            f"pending, reason, size now) {positions_of(deployment, '/appending-')}; "
            f"stopped {deployment.catalog.positions.rewritten()}"
        )
        checked["records appended in place"] = appended
        for name in TABLES:
            shipped = self.shipper.shipped[name]
            physical = current_record_ids(deployment, name)
            hidden = set(shipped) - set(physical)
            in_delayed = delayed_record_ids(deployment, name)
            lost = sorted(hidden - in_delayed)
            assert not lost, f"{name}: {len(lost)} records in no object shown nor delayed (e.g. {lost[:5]})"
            shown = [rid for rid in shipped if rid not in hidden]
            for reader, seen in reader_record_ids(spark, deployment, name).items():
                problem = exactly_once(shown, seen)
                assert problem is None, (
                    f"{name} through {reader} before the drain's merges: {problem}\n"
                    + explain_lost(deployment, name, set(shown) - set(seen))
                )
            checked["rows"] += physical.total()
            checked["records"] += len(shipped)
            checked["records shown"] += len(shown)
            checked["duplicated records"] += sum(n > 1 for n in physical.values())
        # The re-sent copies must still be there physically, or this checked no merge-on-read.
        assert checked["rows"] > checked["records shown"] and checked["duplicated records"] > 0, checked
        return dict(checked)

    def drain(self, spark) -> None:  # a SparkSession
        """Every daemon is dead: finish the work in this process (the same functions the daemons run) until
        nothing changes, past the job timeout so dead workers' claims are taken over; then one reap."""
        deployment = self.deployment
        deployment.use_spark(spark)
        started = time.monotonic()
        time.sleep(JOB_TIMEOUT + 0.5)
        for round_ in range(1, 30):
            streamed = stream_once(deployment)
            self.report.delayed_objects += streamed.delayed_objects
            # A job a kill failed waits out its retry backoff (doubling with its attempts, up to an hour): the
            # drain finishes the work now, as `silt merge --once --now` does, rather than stop while it waits.
            deployment.catalog.merge_queue.advance(utcnow())
            merged = merge_once(deployment)
            published = publish_once(deployment)
            assert not streamed.failed and not merged.failed, (streamed.failed, merged.errors)
            # The worker's repair of objects left without a job must find nothing: a race that leaves some
            # would otherwise be mended here and hidden (the daemons' logs are checked in check()).
            assert not merged.unqueued, f"{merged.unqueued} partitions held unmerged objects with no merge job"
            busy = (
                streamed.processed
                or merged.claimed
                or published.switched
                or published.closed
                or published.live_versions
                or published.merged_versions
                or published.skipped_merged
            )
            if not busy and not deployment.catalog.staging.pending(1) and not held_jobs(deployment):
                self.report.drain_rounds = round_
                break
            time.sleep(1.0 if merged.claimed == 0 else 0.0)  # a taken-over claim's job timeout
        else:
            raise AssertionError("the drain did not become idle in 30 rounds")
        report = reap_once(deployment, retention=3, grace=90, force=True)
        assert not report.failed and not report.warnings, report
        self.report.drain_seconds = time.monotonic() - started

    def check(self, spark) -> dict[str, int]:  # a SparkSession
        """The four invariants after the drain; returns what was checked."""
        deployment = self.deployment
        catalog, lake = deployment.catalog, deployment.lake
        checked = collections.Counter()
        # 4. No claim is left (every claim of a killed worker was taken over and its job done), and no merge
        # daemon found objects left without a job (its periodic repair would hide the race that left them).
        assert held_jobs(deployment) == []
        assert [p.name for p in self.everything if "merge.unqueued" in p.log()] == []
        for table in catalog.tables.list():
            layout = table.layout(deployment.instance_key)
            objects = catalog.partitions.small_objects(table.id)
            small = {o.id: (o.partition_date, o.delayed) for o in objects}
            # 1. Every catalog row's object exists.
            missing = [
                key
                for key in (layout.small_object(o.partition_date, o.id, o.delayed) for o in objects)
                if not lake.exists(key)
            ]
            checked["small objects"] += len(objects)
            partitions = catalog.partitions.list(table.id)
            for partition in partitions:
                for merged in catalog.merge_queue.ranges(partition.id):
                    if merged.lower is not None:
                        checked["merge ranges"] += 1
                        key = merged.key(layout, partition.partition_date)
                        missing += [] if lake.exists(key) else [key]
            assert missing == [], f"{table.qualified_name}: catalog rows without their object: {missing[:20]}"
            # 2. Every published version is whole and holds its row count.
            dates = {p.id: p.partition_date for p in partitions}
            for version in catalog.versions.of_partitions(list(dates)):
                keys = version_objects(deployment, layout, version, dates[version.partition_id], small)
                if version.manifest_key:
                    assert lake.exists(version.manifest_key) and lake.exists(symlink_key(version.manifest_key))
                    assert read_manifest(lake, version.manifest_key)
                gone = [key for key in keys if not lake.exists(key)]
                assert gone == [], f"version {version} lost {gone}"
                assert sum(rows_of(deployment, keys).values()) == version.row_count, version
                checked["versions"] += 1
            # 3. Each shipped record exactly once in the current state, through every reader (Spark's
            # read.table and read.sql, the table API's Arrow and DuckDB readers). The objects the reader's
            # snapshot shows hold every shipped id; a switched partition's are one merged object with each
            # id once (the keyed merge kept one row per key); a live one may still hold re-sent copies.
            shipped = self.shipper.shipped[table.qualified_name]
            for reader, seen in reader_record_ids(spark, deployment, table.qualified_name).items():
                problem = exactly_once(shipped, seen)
                assert problem is None, f"{table.qualified_name} through {reader}: {problem}\n" + explain_lost(
                    deployment, table.qualified_name, set(shipped) - set(seen)
                )
            switched = {p.partition_date for p in partitions if p.switched}
            physical = collections.Counter()
            for date, (keys, ids) in current_objects(deployment, table.qualified_name).items():
                physical.update(ids)
                if date in switched:
                    assert len(keys) == 1 and max(ids.values(), default=1) == 1, (table.qualified_name, date, keys)
                    checked["merged objects with each id once"] += 1
            assert set(physical) == set(shipped), table.qualified_name
            checked["records"] += len(shipped)
            checked["partitions switched"] += sum(p.switched for p in partitions)
        return dict(checked)

    def close(self) -> None:
        self.stop_all()
        self.deployment.close()

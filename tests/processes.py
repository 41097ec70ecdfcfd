"""Real `silt` processes for crash, outage and load tests, and a shipper that feeds them staging objects.

API (other test modules import it; keep names stable):
- silt_env(tmp_path, url, **sections): write a config file, return the environment that selects it
- SiltProcess(log_dir, name, env, *args): one `silt` process in a session of its own, logging to files
- run_silt(env, *args): run a one-shot `silt` command to its end
- kill_session(session): SIGKILL every process of a session (driver, Spark JVM, Python executors)
- wait_until(condition, processes, timeout, what): poll; fail with the processes' log tails
- session_rss(session): resident memory of a session's processes by kind (driver, jvm, workers)
- silt_status(env): `silt status --json` tables
- held_jobs, owner_pid, successes, pid_alive: merge claims and commits seen in the catalog
- Shipper: gzip JSON-lines staging objects at a steady rate, every record with a unique record_id
  (resend: a share of the objects written again under new names)
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog import schema_discovery as sd
from siltlake.deployment import Deployment

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")

# A table the shipper's records fit: UTC days, so a record's partition date is the date it was shipped for.
SHIPPED_TABLE = {
    "schema": "chaos",
    "time_column": "utc_event_time",
    "timezone": "UTC",
    "merge_interval": 0,
    "columns": [
        {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
        {"name": "record_id", "type": "bigint", "nullable": False},
        {"name": "user_id", "type": "bigint"},
        {"name": "action", "type": "string"},
    ],
}


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return json.dumps(str(value))  # a TOML basic string


def silt_env(tmp_path: Path, url: str, **sections: dict[str, object]) -> dict[str, str]:
    """Write tmp_path/siltlake.toml (the layout of conftest.make_config, Spark on local[1]) with extra
    settings per section, e.g. merge={"slots": 2}, spark={"conf": {...}}; returns the environment."""
    spark = {"master": "local[1]", **sections.pop("spark", {})}
    # Files written just before a `silt stream --once` are taken at once, unless a test settles them.
    sections["stream"] = {"settle_time": 0, **sections.get("stream", {})}
    conf = spark.pop("conf", {})
    tables = {
        "catalog": {"url": url},
        "storage": {"root": str(tmp_path / "lake"), "staging_root": str(tmp_path / "staging")},
        "spark": spark,
        **sections,
    }
    lines = ['instance_key = "test0001"']
    for name, values in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    if conf:
        lines.append("[spark.conf]")
        lines += [f"{json.dumps(key)} = {_toml_value(value)}" for key, value in conf.items()]
    path = tmp_path / "siltlake.toml"
    path.write_text("\n".join(lines) + "\n")
    return {**os.environ, "SILTLAKE_CONFIG": str(path), "PYTHONUNBUFFERED": "1", "COLUMNS": "300"}


class SiltProcess:
    """One `silt` process in a session of its own; stdout and stderr go to files (never a full pipe)."""

    def __init__(self, log_dir: Path, name: str, env: dict[str, str], *args: str) -> None:
        self.name = name
        self.args = args
        self.out = log_dir / f"{name}.out"
        self.err = log_dir / f"{name}.err"
        with self.out.open("ab") as out, self.err.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "siltlake.cli", *args], env=env, stdout=out, stderr=err, start_new_session=True
            )
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        """stdout and stderr so far (the daemons print their reports and errors on stderr)."""
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def tail(self) -> str:
        return (
            f"--- {self.name} ({' '.join(self.args)}) stdout:\n{self.out.read_text(errors='replace')[-2000:]}\n"
            f"--- stderr:\n{self.err.read_text(errors='replace')[-4000:]}"
        )

    def kill(self) -> None:
        """SIGKILL every process of the session (driver, JVM, executors), then reap the driver."""
        kill_session(self.pid)
        self.proc.wait(timeout=30)


def run_silt(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A one-shot `silt` command run to its end (its own session, so a timeout kills its JVM too)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "siltlake.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_session(proc.pid)
        proc.wait(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _stat(pid: int | str) -> list[str] | None:
    """Fields of /proc/pid/stat after the command name: state, ppid, pgrp, session, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def session_members(session: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(entry)
            if fields and int(fields[3]) == session and fields[0] != "Z":
                members.append(int(entry))
    return members


def kill_session(session: int) -> None:
    """SIGKILL the processes of a session this test started (its leader's pid is the session id)."""
    if not Path("/proc/self/stat").exists():  # no procfs: the leader's process group is the best we have
        with contextlib.suppress(ProcessLookupError):
            os.killpg(session, signal.SIGKILL)
        return
    for _ in range(100):  # a process may fork while we look: repeat until the session is empty
        members = session_members(session)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def session_rss(session: int) -> dict[str, int]:
    """Resident bytes of a session's processes: the driver (the leader), the Spark JVM(s), and the rest
    (Python workers the JVM forks)."""
    rss = {"driver": 0, "jvm": 0, "workers": 0}
    for pid in session_members(session):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
        except (OSError, IndexError, ValueError):
            continue  # ended while we looked
        kind = "driver" if pid == session else "jvm" if comm == "java" else "workers"
        rss[kind] += resident
    return rss


def wait_until(condition: Callable[[], object], processes: Sequence[SiltProcess], timeout: float, what: str) -> None:
    """Poll until condition holds; fail if one of the processes exits meanwhile or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        for process in processes:
            if not process.alive():
                pytest.fail(
                    f"{process.name} exited with {process.proc.returncode} while waiting for {what}\n" + process.tail()
                )
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f} s\n" + "\n".join(p.tail() for p in processes))
        time.sleep(0.02)


def silt_status(env: dict[str, str]) -> list[dict]:
    done = run_silt(env, "status", "--json", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["tables"]


# --- catalog observations -------------------------------------------------------------------------------

SUCCESS = ("finished", "continuing")  # merge job log outcomes that committed


def held_jobs(deployment: Deployment) -> list[sa.Row]:
    """Merge jobs claimed by some worker: (id, partition_id, owner)."""
    j = s.merge_jobs
    with deployment.catalog.engine.connect() as c:
        return c.execute(sa.select(j.c.id, j.c.partition_id, j.c.owner).where(j.c.ongoing_mark > 0)).all()


def owner_pid(owner: str | None) -> int | None:
    """The pid in a merge owner (default_owner() is host:pid:random)."""
    parts = (owner or "").rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def successes(deployment: Deployment) -> int:
    """Merge jobs committed so far (finished or continuing)."""
    log = s.merge_job_log
    with deployment.catalog.engine.connect() as c:
        return c.execute(sa.select(sa.func.count()).where(log.c.outcome.in_(SUCCESS))).scalar_one()


def delivered_records(deployment: Deployment, name_part: str) -> tuple[int, int]:
    """(records read, bad records) of the processed staging deliveries whose URI holds `name_part`: a file
    appended to is delivered in pieces, and each of its records must be read exactly once."""
    so = s.staging_objects
    with deployment.catalog.engine.connect() as c:
        row = c.execute(
            sa.select(
                sa.func.coalesce(sa.func.sum(so.c.records_in), 0), sa.func.coalesce(sa.func.sum(so.c.bad_records), 0)
            ).where(so.c.uri.contains(name_part), so.c.processed_time.is_not(None))
        ).one()
    return int(row[0]), int(row[1])


def deliveries_of(deployment: Deployment, name_part: str) -> list[tuple[str, int | None, int | None]]:
    """(name and range, records read, bad records) of the staging rows whose URI holds `name_part`, in the order
    registered: what a failure of delivered_records shows."""
    so = s.staging_objects
    with deployment.catalog.engine.connect() as c:
        rows = c.execute(
            sa.select(so.c.uri, so.c.records_in, so.c.bad_records).where(so.c.uri.contains(name_part)).order_by(so.c.id)
        ).all()
    return [(uri.rpartition("/")[2], records, bad) for uri, records, bad in rows]


def positions_of(deployment: Deployment, name_part: str) -> list[tuple]:
    """(key's name, state, identity, consumed end, read end, pending delivery, reason) of the followed files whose URI
    holds `name_part`, with each file's size on disk now (None: gone): what a failure of delivered_records shows
    beside deliveries_of, since the catalog is dropped with the test."""
    p = sd.staging_positions
    with deployment.catalog.engine.connect() as c:
        rows = c.execute(
            sa.select(
                p.c.key, p.c.state, p.c.file_identity, p.c.consumed_end, p.c.read_end, p.c.pending_uri, p.c.reason
            )
            .where(p.c.uri.contains(name_part))
            .order_by(p.c.id)
        ).all()
    sizes = {}
    for key, *_ in rows:
        with contextlib.suppress(OSError):
            sizes[key] = os.stat(deployment.staging.path(key)).st_size
    name = lambda uri_or_key: (uri_or_key or "").rpartition("/")[2]  # noqa: E731
    return [
        (name(key), state, identity, consumed, read, name(pending), why, sizes.get(key))
        for key, state, identity, consumed, read, pending, why in rows
    ]


def pid_alive(pid: int | None) -> bool:
    fields = _stat(pid) if pid else None
    return fields is not None and fields[0] != "Z"


# --- staging objects ------------------------------------------------------------------------------------


class Shipper:
    """Writes gzip JSON-lines staging objects, as Fluentd would, into the stream's key layout
    (`ship.<schema>.<table>/YYYY/MM/DD/<name>`), each under a hidden name first and renamed when whole.

    Every record has a record_id unique across the run, so exactly-once can be checked per table; the
    event time falls on a date drawn from `dates` (UTC noon +- a few hours), so a test can aim records at
    days publish has closed (they become delayed objects).

    `resend` (a fraction) re-sends chunks as a shipper retrying after a failover does: that share of the
    objects is written again, the same bytes under a new staging name, a few objects later, and a quarter of
    those a third time. Only a keyed table (primary key record_id) shows such records once; `shipped` holds
    each id once, `resent` counts the extra objects.

    `append` (a fraction) writes that share of the chunks as plain JSON lines appended in place to one
    long-lived file per table (`appending-<table>.log`, as Fluentd's and Fluent Bit's out_file do), in two
    writes split at a random byte, mid-line: the stream must load each line once, never half of one.
    `appended` holds those records' ids per table.

    `rotate` (a fraction) rotates an appended file after that share of its appends, as logrotate does, taking turns
    between its two modes: `create` renames it (`.log` to `.log.1`, the older ones shifted up first: `.1` to `.2`, ...;
    none deleted) and the next append starts a new file; `copytruncate` copies it to `.log.1` (the older ones shifted)
    and truncates it in place. Between two appends, so no line is split across files and none lost in the copy.
    `rotations` counts them per mode."""

    def __init__(
        self,
        staging_root: Path,
        tables: Sequence[str],
        dates: Sequence[dt.date],
        *,
        rate: float = 2.0,
        records: tuple[int, int] = (5, 40),
        seed: int = 0,
        resend: float = 0.0,
        append: float = 0.0,
        rotate: float = 0.0,
    ) -> None:
        self.root = Path(staging_root)
        self.tables = list(tables)
        self.dates = list(dates)
        self.rate = rate  # objects per second
        self.records = records
        self.rng = random.Random(seed)
        self.shipped: dict[str, list[int]] = {name: [] for name in self.tables}
        self.objects = 0
        self.resend = resend
        self.resent = 0
        self.append = append
        self.appended: dict[str, list[int]] = {name: [] for name in self.tables}
        self.rotate = rotate
        self.rotations: dict[str, int] = {"create": 0, "copytruncate": 0}
        # Copies still to write: (the object count after which it is due, folder, name, bytes).
        self._resends: list[tuple[int, Path, str, bytes]] = []
        self._next_id = 1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def ship_one(self, table: str | None = None, date: dt.date | None = None, *, resent_now: bool = False) -> Path:
        """Write one staging object now; returns its path. `resent_now` writes it as an object (never appended
        in place) and its re-sent copy at once."""
        with self._lock:
            table = table or self.rng.choice(self.tables)
            date = date or self.rng.choice(self.dates)
            count = self.rng.randint(*self.records)
            ids = range(self._next_id, self._next_id + count)
            self._next_id += count
            noon = dt.datetime.combine(date, dt.time(12), tzinfo=dt.UTC)
            lines = [
                json.dumps(
                    {
                        "time": (noon + dt.timedelta(seconds=self.rng.randint(-40000, 40000)))
                        .isoformat()
                        .replace("+00:00", "Z"),
                        "record_id": record_id,
                        "user_id": record_id % 1000,
                        "action": f"a{record_id % 7}",
                    }
                )
                + "\n"
                for record_id in ids
            ]
            folder = self.root / f"ship.{table}" / f"{dt.date.today():%Y/%m/%d}"
            folder.mkdir(parents=True, exist_ok=True)
            # Drawn only when appending, so that a seed draws the same objects as before without it.
            if self.append and not resent_now and self.rng.random() < self.append:
                path = folder / f"appending-{table.split('.')[-1]}.log"
                self._append(path, "".join(lines).encode())
                self.shipped[table].extend(ids)
                self.appended[table].extend(ids)
                # Drawn only when rotating, so that a seed draws the same objects as before without it. The first
                # two appends rotate whatever the draw: a short run still sees both modes.
                if self.rotate and (self.rng.random() < self.rotate or sum(self.rotations.values()) < 2):
                    self._rotate(path)
                return path
            self.objects += 1
            name = f"{self.objects:08d}-{ids[0]}.jsonl.gz"
            data = gzip.compress("".join(lines).encode(), compresslevel=1)
            self._put(folder, name, data)
            self.shipped[table].extend(ids)
            if resent_now:
                self._put(folder, f"{name.removesuffix('.jsonl.gz')}-resent0.jsonl.gz", data)
                self.resent += 1
            # Decided only when re-sending, so that a seed draws the same objects as before without it.
            if self.resend and self.rng.random() < self.resend:
                copies = 2 if self.rng.random() < 0.25 else 1
                for copy in range(1, copies + 1):
                    due = self.objects + self.rng.randint(0, 8) * copy
                    self._resends.append((due, folder, f"{name.removesuffix('.jsonl.gz')}-resent{copy}.jsonl.gz", data))
            self._flush_resends(self.objects)
            return folder / name

    def _append(self, path: Path, data: bytes) -> None:
        """Append in place in two writes, the first ending mid-line; the rest follows within 50 ms, as a
        writer's next write() of the same flush would."""
        cut = self.rng.randint(1, len(data) - 1)
        with path.open("ab") as file:
            file.write(data[:cut])
            file.flush()
            time.sleep(self.rng.uniform(0.0, 0.05))
            file.write(data[cut:])

    def _rotate(self, path: Path) -> None:
        """logrotate's rotation of an appended file, its two modes in turn (the lock held: no append meanwhile)."""
        mode = "create" if self.rotations["create"] <= self.rotations["copytruncate"] else "copytruncate"
        older = sorted(
            (
                int(p.name.rpartition(".")[2])
                for p in path.parent.glob(path.name + ".*")
                if p.name.rpartition(".")[2].isdigit()
            ),
            reverse=True,
        )
        for number in older:
            os.rename(f"{path}.{number}", f"{path}.{number + 1}")
        if mode == "create":
            os.rename(path, f"{path}.1")
        else:
            shutil.copyfile(path, f"{path}.1")
            with path.open("r+b") as file:
                file.truncate(0)
        self.rotations[mode] += 1

    def _put(self, folder: Path, name: str, data: bytes) -> None:
        """Write under a hidden name, then rename: the stream never lists a partial object."""
        hidden = folder / f".{name}.tmp"
        hidden.write_bytes(data)
        os.replace(hidden, folder / name)

    def _flush_resends(self, upto: float) -> None:
        """Write the re-sent copies due by object count `upto` (the lock held)."""
        due = [item for item in self._resends if item[0] <= upto]
        self._resends = [item for item in self._resends if item[0] > upto]
        for _, folder, name, data in due:
            self._put(folder, name, data)
            self.resent += 1

    def start(self) -> Shipper:
        self._thread = threading.Thread(target=self._run, daemon=True, name="shipper")
        self._thread.start()
        return self

    def _run(self) -> None:
        period = 1.0 / self.rate
        due = time.monotonic()
        while not self._stop.is_set():
            self.ship_one()
            due += period
            self._stop.wait(max(0.0, due - time.monotonic()))  # a steady rate, not rate after each write

    def stop(self) -> None:
        """Stop shipping; copies still due to be re-sent are written now."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        with self._lock:
            self._flush_resends(float("inf"))

    def total(self) -> int:
        return sum(len(ids) for ids in self.shipped.values())


def free_port() -> int:
    """A TCP port of 127.0.0.1 nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

"""A load's resume state (after Embulk's resume.yml: the tasks, and each one's report or null if it failed),
and the lock that lets one run at a time use it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.load.config import LoadConfig
from siltlake.load.inputs import list_inputs, splits

STATE_VERSION = 1


def read_state(path: Path) -> dict | None:
    import yaml

    if not path.exists():
        return None
    try:
        state = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not a resume state: {str(exc).splitlines()[0]}") from None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION or "jobs" not in state:
        raise ConfigError(f"{path} is not a siltlake resume state; give another --resume-state path")
    return state


def write_state(path: Path, state: dict) -> None:
    import yaml

    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(yaml.safe_dump(state, sort_keys=False, allow_unicode=True))
    temporary.replace(path)


def new_state(deployment: Deployment, config: LoadConfig) -> dict:
    run_id = f"load-{utcnow():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    jobs = {}
    for name, job in config.jobs.items():
        inputs = list_inputs(job.input.path)
        if not inputs:
            raise ConfigError(f"jobs.{name}.in.path: no files match {job.input.path}")
        tasks = [task for uri, size in inputs for task in splits(job, uri, size)]
        jobs[name] = {"table": job.out.table, "tasks": tasks, "reports": [None] * len(tasks), "sql_reports": None}
    return {
        "version": STATE_VERSION,
        "config_hash": config.digest(),
        "run_id": run_id,
        "created": utcnow().isoformat(),
        "version_mark": deployment.catalog.versions.mark(),
        "instance_key": deployment.instance_key,
        "committed": False,
        "jobs": jobs,
    }


@contextmanager
def one_run_per_state(path: Path | None) -> Iterator[None]:
    """Hold an exclusive lock on `<state>.lock` while a run reads, runs and commits its resume state.

    Two runs of the same state at once would each start a new run id and both commit: the second waits
    instead, then finds the state committed (or resumes what the first left)."""
    if path is None:
        yield
        return
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_name(path.name + ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield

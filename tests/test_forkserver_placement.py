"""A command run by the fork server runs where and as eagerly as its client: in the client's cgroups, on its CPUs,
with its scheduling policy, nice value and I/O priority (what `nice`, `ionice`, `taskset`, `chrt` or a service
manager's slice set), not the server's; a placement the server may not take makes the client run the command."""

from __future__ import annotations

import codecs
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from siltlake.forkserver import placement

from .test_forkserver import SILT, serving_probe

TOOLS = ("nice", "ionice", "taskset", "chrt")


def _served(tmp_path: Path, shell: str) -> tuple[dict, str]:
    """What the probe command saw when the shell line ran `silt` through a probe server (and the client's stderr)."""
    with serving_probe(tmp_path) as (env, _stamp):
        client = subprocess.run(shell, shell=True, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert client.returncode == 0, client.stderr
    return json.loads(client.stdout)["placement"], client.stderr


@pytest.mark.skipif(not all(shutil.which(tool) for tool in TOOLS), reason=f"needs {', '.join(TOOLS)}")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin the client to one")
def test_the_command_takes_the_clients_nice_value_io_priority_cpus_and_policy(tmp_path: Path) -> None:
    here = placement.of_this_process()
    cpu = min(os.sched_getaffinity(0))
    seen, _ = _served(tmp_path, f"nice -n 7 ionice -c 2 -n 6 taskset -c {cpu} chrt --batch 0 {SILT} 0")
    assert seen["nice"] == here["nice"] + 7 and seen["affinity"] == [cpu] and seen["policy"] == os.SCHED_BATCH
    if here["ioprio"] is not None:
        assert seen["ioprio"] == (2 << 13) | 6  # IOPRIO_CLASS_BE, level 6
    # Without them, the server's (this test's own).
    plain, _ = _served(tmp_path, f"{SILT} 0")
    assert {name: plain[name] for name in ("nice", "affinity", "policy", "ioprio")} == {
        name: here[name] for name in ("nice", "affinity", "policy", "ioprio")
    }


def _own_cgroup() -> tuple[Path, str] | None:
    """A new cgroup v2 group this process may create (root on a writable unified hierarchy), and its path."""
    for mount in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (mount / "cgroup.procs").exists() and os.access(mount, os.W_OK):
            group = mount / f"siltlake-test-{uuid.uuid4().hex[:8]}"
            try:
                group.mkdir()
            except OSError:
                continue
            return group, "/" + group.name
    return None


def test_the_command_runs_in_the_clients_cgroup(tmp_path: Path) -> None:
    made = _own_cgroup()
    if made is None:
        if os.environ.get("CI") == "true" and os.geteuid() == 0:
            pytest.fail("CI runs as root but no writable cgroup v2 hierarchy was found")
        pytest.skip("no cgroup v2 hierarchy this user may create a group in")
    group, name = made
    try:
        seen, _ = _served(tmp_path, f"echo $$ > {group}/cgroup.procs && exec {SILT} 0")
        assert f"0::{name}" in seen["cgroups"].splitlines()
    finally:
        for _ in range(100):  # the command's session leaves the group as it exits
            try:
                group.rmdir()
                break
            except OSError:
                subprocess.run(["sleep", "0.05"], check=False)


def _in_fork(body) -> object:
    """body()'s JSON-able result, computed in a fork: what it changes of its process stays there."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read)
            try:
                found = body()
            except BaseException as exc:  # to the test, which says what went wrong
                found = {"raised": repr(exc)}
            os.write(write, json.dumps(found).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        found = json.loads(answer.read())
    os.waitpid(child, 0)
    return found


def test_a_lower_nice_value_is_taken_by_root_and_refused_to_others() -> None:
    def lower() -> dict:
        os.setpriority(os.PRIO_PROCESS, 0, 10)
        refusal = placement.take({**placement.of_this_process(), "nice": 0})
        return {"refusal": refusal, "nice": os.getpriority(os.PRIO_PROCESS, 0)}

    found = _in_fork(lower)
    if os.geteuid() == 0:
        assert found == {"refusal": None, "nice": 0}
    else:
        assert "nice value (0)" in found["refusal"] and found["nice"] == 10, found


def _pids_hierarchy() -> tuple[Path, str] | None:
    """A pids controller this process may make groups in: (its directory, its /proc/PID/cgroup name)."""
    v1 = Path("/sys/fs/cgroup/pids")
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1, "pids"
    for unified in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        controllers = unified / "cgroup.subtree_control"
        if controllers.exists() and "pids" in controllers.read_text().split() and os.access(unified, os.W_OK):
            return unified, ""
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="makes cgroups and enters them as another user: needs root")
def test_a_cgroup_the_server_may_not_enter_is_refused_only_when_it_limits() -> None:
    """The server's user may not enter another login session's scope or a system service's cgroup: the command then
    runs in the server's, unless the client's sets a limit (here pids.max) the command would escape."""
    found = _pids_hierarchy()
    if found is None:
        pytest.skip("no pids controller to make groups in")
    hierarchy, name = found
    limited, free = (hierarchy / f"siltlake-test-{uuid.uuid4().hex[:8]}" for _ in range(2))
    limited.mkdir()
    free.mkdir()
    try:
        (limited / "pids.max").write_text("50")

        def as_nobody(group: Path) -> object:
            def body() -> object:
                here = placement.of_this_process()
                listing = "".join(
                    f"{line.split(':')[0]}:{name}:/{group.name}\n" if line.split(":")[1] == name else line + "\n"
                    for line in (here["cgroups"] or "").splitlines()
                )
                codecs.lookup("ascii")  # imported now: nobody may not read this interpreter's files under /root
                os.setuid(65534)
                return placement.take({**here, "cgroups": listing})

            return _in_fork(body)

        refusal = as_nobody(limited)
        assert isinstance(refusal, str) and "pids.max = 50" in refusal and "may not enter" in refusal, refusal
        assert as_nobody(free) is None
        missing = _in_fork(lambda: placement.take({"cgroups": f"0:{name}:/siltlake-no-such-group\n"}))
        assert isinstance(missing, str) and "not visible here" in missing, missing
    finally:
        limited.rmdir()
        free.rmdir()


def test_a_client_with_other_arrow_settings_runs_the_command_itself(tmp_path: Path) -> None:
    with serving_probe(tmp_path) as (env, _stamp):
        other = subprocess.run(
            [SILT, "--version"], env={**env, "ARROW_IO_THREADS": "3"}, capture_output=True, text=True, timeout=60
        )
    assert other.returncode == 0 and "version" in other.stdout  # it ran here, as the `silt` group
    assert "refused" in other.stderr and "ARROW_*" in other.stderr

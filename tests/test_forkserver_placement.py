"""A command run by the fork server runs where and as eagerly as its client: in the client's cgroups, on its CPUs,
with its scheduling policy, nice value and I/O priority (what `nice`, `ionice`, `taskset`, `chrt` or a service
manager's slice set), not the server's; a placement the server may not take makes the client run the command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from siltlake.forkserver import placement

from .test_forkserver import SILT, probe_server

TOOLS = ("nice", "ionice", "taskset", "chrt")


def _served(tmp_path: Path, shell: str) -> tuple[dict, str]:
    """What the probe command saw when the shell line ran `silt` through a probe server (and the client's stderr)."""
    stamp = tmp_path / "stamp"
    stamp.write_text("1")
    server, env, _path = probe_server(tmp_path, stamp)
    try:
        client = subprocess.run(shell, shell=True, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert client.returncode == 0, client.stderr
        return json.loads(client.stdout)["placement"], client.stderr
    finally:
        server.kill()
        server.wait()


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


def test_a_placement_the_server_may_not_take_is_refused() -> None:
    """In a fork, so that this process keeps its own: a cgroup that does not exist here, and (for a user without the
    privilege) a lower nice value than the server's."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(read)
            os.setpriority(os.PRIO_PROCESS, 0, 10)
            here = placement.of_this_process()
            results = {
                "cgroup": placement.take({**here, "cgroups": "0::/siltlake-no-such-group\n"}),
                "nice": placement.take({**here, "nice": 0}),
                "nice_after": os.getpriority(os.PRIO_PROCESS, 0),
            }
            os.write(write, json.dumps(results).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        results = json.loads(answer.read())
    os.waitpid(child, 0)
    if os.path.exists("/proc/self/cgroup") and "0::" in Path("/proc/self/cgroup").read_text():
        assert "siltlake-no-such-group" in results["cgroup"] and "may not be entered" in results["cgroup"], results
    if os.geteuid() == 0:  # root may lower it: taken
        assert results["nice"] is None and results["nice_after"] == 0, results
    else:
        assert "nice value (0)" in results["nice"] and results["nice_after"] == 10, results


def test_a_client_with_other_arrow_settings_runs_the_command_itself(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp"
    stamp.write_text("1")
    server, env, _path = probe_server(tmp_path, stamp)
    try:
        other = subprocess.run(
            [SILT, "--version"], env={**env, "ARROW_IO_THREADS": "3"}, capture_output=True, text=True, timeout=60
        )
        assert other.returncode == 0 and "version" in other.stdout  # it ran here, as the `silt` group
        assert "refused" in other.stderr and "ARROW_*" in other.stderr
    finally:
        server.kill()
        server.wait()

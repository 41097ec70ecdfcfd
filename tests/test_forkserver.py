"""The fork server: `silt` commands run as forks of a process that has siltlake imported, and behave as they do in
their own process (output, exit status, environment, directory, signals); a client it cannot serve runs the
command itself."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from siltlake.forkserver import wire

from .processes import silt_env
from .test_cli import TABLE_TOML

SILT = str(Path(sys.executable).with_name("silt"))
PIPES: dict = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
pytestmark = pytest.mark.skipif(not Path(SILT).exists(), reason=f"no installed `silt` script at {SILT}")


def run(env: dict[str, str], *args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([SILT, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def connections(env: dict[str, str]) -> int:
    """The connections the server accepted before this one (a status request is one too)."""
    status = run(env, "forkserver", "status", "--json")
    return int(json.loads(status.stdout)["connections"])


def served_since(env: dict[str, str], before: int) -> int:
    """Connections after the status request that read `before`."""
    return connections(env) - before - 1


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def commands_of(server: int) -> list[int]:
    """The commands the server runs: its sessions' children."""
    return [command for session in children(server) for command in children(session)]


def wait_for(condition, what: str, seconds: float = 60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"waited {seconds} s for {what}")


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Iterator[tuple[Path, dict[str, str], dict[str, str], int]]:
    """A deployment (SQLite) with web.access, a fork server for it, and the environments with and without it."""
    root = tmp_path_factory.mktemp("forked")
    base = silt_env(root, f"sqlite:///{root / 'catalog.db'}")
    base.pop("SILT_PROFILE", None)
    forked = {**base, "SILT_FORKSERVER": str(root / "run" / "forkserver.sock")}
    alone = {**base, "SILT_FORKSERVER": "off"}
    (root / "access.toml").write_text(TABLE_TOML)
    started = run(forked, "forkserver", "start")
    assert started.returncode == 0, started.stderr
    server = json.loads(run(forked, "forkserver", "status", "--json").stdout)["pid"]
    try:
        yield root, forked, alone, server
    finally:
        stopped = run(forked, "forkserver", "stop")
        assert stopped.returncode == 0, stopped.stderr
        assert not (root / "run" / "forkserver.sock").exists()


def put_events(root: Path, name: str, hours: range) -> None:
    folder = root / "staging" / "f.web.access" / "2026" / "11" / "20"
    folder.mkdir(parents=True, exist_ok=True)
    lines = (json.dumps({"time": f"2026-11-20T{h:02}:00:00Z", "user_id": h, "action": "v"}) + "\n" for h in hours)
    (folder / name).write_bytes(gzip.compress("".join(lines).encode()))


def test_the_pipeline_runs_through_the_server_as_in_its_own_process(lake) -> None:
    root, forked, alone, _server = lake
    before = connections(forked)
    for _ in range(2):  # the second upgrades an up-to-date catalog: nothing to do
        initialised = run(forked, "init")
        assert initialised.returncode == 0 and "instance" in initialised.stdout + initialised.stderr, initialised
    created = run(forked, "table", "create", "access.toml", cwd=root)  # a path relative to the client's directory
    assert created.returncode == 0 and "created table web.access" in created.stdout + created.stderr, created
    put_events(root, "a.jsonl.gz", range(4))
    streamed = run({**forked, "SILT_PROFILE": "1"}, "stream", "--once", "--json")
    assert streamed.returncode == 0, streamed.stderr
    assert json.loads(streamed.stdout)["records_loaded"] == 4
    # The fork had its libraries: the profile lists no heavy import after the command's start.
    late = [line for line in streamed.stderr.splitlines() if "imports after start" in line]
    heavy = ("sqlalchemy", "pyarrow", "pydantic", "duckdb", "pandas", "numpy", "sqlite3", "siltlake")
    assert not any(f" {name} " in line for line in late for name in heavy), late
    count = "SELECT count(*) AS n, sum(user_id) AS s FROM web.access"
    through_server = run(forked, "sql", "--format", "csv", count)
    in_process = run(alone, "sql", "--format", "csv", count)
    assert through_server.stdout == in_process.stdout == "n,s\n4,6\n"
    assert served_since(forked, before) == 5  # init twice, create, stream, sql: the `off` run did not connect

    missing = [run(env, "table", "show", "web.missing") for env in (forked, alone)]
    assert [result.returncode for result in missing] == [2, 2]
    assert missing[0].stderr == missing[1].stderr and "web.missing" in missing[0].stderr


def test_the_command_gets_the_clients_environment_directory_and_umask(lake, tmp_path: Path) -> None:
    root, forked, alone, _server = lake
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The configuration named by an environment variable only this client has, a directory only it is in.
    env = {**forked, "SILTLAKE_CONFIG": str(root / "siltlake.toml"), "COLUMNS": "300"}
    shown = run(env, "table", "list", cwd=elsewhere)
    assert shown.returncode == 0 and "web.access" in shown.stdout, shown
    without = {**forked, "SILTLAKE_CONFIG": str(tmp_path / "nowhere.toml")}
    failed = run(without, "table", "list", cwd=elsewhere)
    assert failed.returncode != 0 and "nowhere.toml" in failed.stderr
    # Files the command creates get the client's umask: the catalog of a new deployment here.
    (tmp_path / "new").mkdir()
    fresh = silt_env(tmp_path / "new", f"sqlite:///{tmp_path / 'new' / 'catalog.db'}")
    fresh["SILT_FORKSERVER"] = forked["SILT_FORKSERVER"]
    initialised = subprocess.run(f"umask 077 && exec {SILT} init", shell=True, env=fresh, capture_output=True)
    assert initialised.returncode == 0, initialised.stderr
    assert (tmp_path / "new" / "catalog.db").stat().st_mode & 0o077 == 0


def test_signals_pass_to_the_command_and_its_end_is_the_clients(lake, tmp_path: Path) -> None:
    root, forked, _alone, server = lake
    log = tmp_path / "daemon.err"

    def daemon() -> subprocess.Popen:
        with log.open("wb") as err:
            return subprocess.Popen([SILT, "stream", "--interval", "0.2"], env=forked, stderr=err, stdout=err)

    def command_started() -> list[int]:
        return commands_of(server) if "streaming" in log.read_text(errors="replace") else []

    # SIGTERM to the client: the daemon stops after its round, and the client ends as the daemon did.
    client = daemon()
    (command,) = wait_for(command_started, "the daemon's fork")
    assert command != client.pid
    client.send_signal(signal.SIGTERM)
    assert client.wait(timeout=60) == 0, log.read_text()
    wait_for(lambda: not commands_of(server), "the daemon's fork to end")

    # The command killed: the client ends by the same signal.
    client = daemon()
    (command,) = wait_for(command_started, "the daemon's fork")
    os.kill(command, signal.SIGKILL)
    assert client.wait(timeout=60) == -signal.SIGKILL

    # The client killed: its command is stopped (SIGTERM), not left running.
    client = daemon()
    (command,) = wait_for(command_started, "the daemon's fork")
    client.kill()
    client.wait(timeout=30)
    wait_for(lambda: not Path(f"/proc/{command}").exists() or "Z" in _state(command), "the orphaned command to stop")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_client_the_server_cannot_serve_runs_the_command_itself(lake) -> None:
    root, forked, _alone, _server = lake
    before = connections(forked)
    # A PYTHON* setting the server's interpreter did not start with: it would not run the command as this would.
    other = run({**forked, "PYTHONHASHSEED": "7"}, "table", "list")
    assert other.returncode == 0 and "web.access" in other.stdout
    assert "refused" in other.stderr and "PYTHON" in other.stderr
    off = run({**forked, "SILT_FORKSERVER": "off"}, "table", "list")
    assert off.returncode == 0 and "web.access" in off.stdout and not off.stderr
    assert served_since(forked, before) == 1
    # Closed standard input: nothing to hand over, so the command runs here.
    closed = subprocess.run(
        f"exec {SILT} table list <&-", shell=True, env=forked, capture_output=True, text=True, timeout=120
    )
    assert closed.returncode == 0 and "web.access" in closed.stdout
    assert served_since(forked, before) == 2  # and the status request above


PROBE = """
import json, os, resource, sys, time
from siltlake.forkserver import placement
def probe(argv):
    if argv[1] == "wait":  # a running command with a child of its own, until the file argv[2] names exists
        import subprocess
        child = subprocess.Popen(["sleep", "120"])
        open(argv[2] + ".pids", "w").write(f"{os.getpid()} {child.pid}")
        while not os.path.exists(argv[2]):
            time.sleep(0.02)
        child.kill()
        sys.exit(0)
    mask = os.umask(0)
    os.umask(mask)
    seen = {
        "argv": argv[1:], "cwd": os.getcwd(), "umask": mask, "x": os.environ.get("PROBE_X"), "tz": time.timezone,
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE), "stdin": sys.stdin.read(), "ppid": os.getppid(),
        "placement": placement.of_this_process(),
    }
    print(json.dumps(seen))
    sys.exit(int(argv[1]))
"""


def probe_server(tmp_path: Path, stamp: Path) -> tuple[subprocess.Popen, dict[str, str], Path]:
    """A fork server (the clients' interpreter) whose command prints what it sees and exits with argv[1]; its code
    stamp is a file."""
    path = tmp_path / "run" / "s.sock"
    script = PROBE + textwrap.dedent(
        f"""
        from siltlake.forkserver.server import serve
        def ready(path):
            print(path, flush=True)
        serve(probe, {str(path)!r}, stamp=lambda: open({str(stamp)!r}).read(), on_ready=ready)
        """
    )
    env = {**os.environ, "SILT_FORKSERVER": str(path)}
    interpreter = Path(SILT).read_text().splitlines()[0].removeprefix("#!")  # the clients' own
    server = subprocess.Popen([interpreter, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdout.readline().strip() == str(path)
    return server, env, path


@contextlib.contextmanager
def serving_probe(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
    """A probe server for the block: the clients' environment and its code stamp file (write it to change the code)."""
    stamp = tmp_path / "stamp"
    stamp.write_text("1")
    server, env, _path = probe_server(tmp_path, stamp)
    try:
        yield env, stamp
    finally:
        server.kill()
        server.wait()


def test_the_fork_runs_with_the_clients_arguments_streams_directory_and_limits(tmp_path: Path) -> None:
    stamp = tmp_path / "stamp"
    stamp.write_text("1")
    server, env, _path = probe_server(tmp_path, stamp)
    try:
        shell = f"ulimit -n 99 && umask 027 && TZ=Asia/Tokyo PROBE_X=é exec {SILT} 3 'a b'"
        client = subprocess.Popen(shell, shell=True, env=env, cwd=tmp_path, text=True, **PIPES)
        out, err = client.communicate("from stdin", timeout=60)
        assert client.returncode == 3, err
        seen = json.loads(out)
        assert seen["argv"] == ["3", "a b"] and seen["cwd"] == str(tmp_path) and seen["umask"] == 0o027
        assert seen["x"] == "é" and seen["tz"] == -9 * 3600 and seen["nofile"] == [99, 99]
        assert seen["stdin"] == "from stdin" and seen["ppid"] not in (client.pid, server.pid)  # the session's child
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("orphaned", [False, True], ids=["a shell's job", "an orphaned process group"])
def test_ctrl_z_stops_the_command_and_its_children_and_fg_continues_them(tmp_path: Path, orphaned: bool) -> None:
    """A job (the client leads a process group whose parent is in another group of its session, as a shell's job
    does) stops whole. In an orphaned process group the kernel does not stop the client, nor then its command."""
    done = tmp_path / "done"
    with serving_probe(tmp_path) as (env, _stamp):
        grouping = {"start_new_session": True} if orphaned else {"process_group": 0}
        client = subprocess.Popen([SILT, "wait", str(done)], env=env, **PIPES, **grouping)
        pids = wait_for(lambda: Path(f"{done}.pids").exists() and Path(f"{done}.pids").read_text(), "the command")
        command, child = (int(pid) for pid in pids.split())
        client.send_signal(signal.SIGTSTP)  # what the terminal sends a job on Ctrl-Z
        if orphaned:
            time.sleep(0.5)
            wait_for(lambda: all(_state(pid) in "SR" for pid in (client.pid, command, child)), "all three to run on")
            done.touch()
            assert client.wait(timeout=60) == 0
            return
        wait_for(lambda: all(_state(pid) == "T" for pid in (client.pid, command, child)), "all three to stop")
        client.send_signal(signal.SIGCONT)  # `fg`
        wait_for(lambda: all(_state(pid) in "SR" for pid in (client.pid, command, child)), "all three to continue")
        done.touch()
        assert client.wait(timeout=60) == 0, client.stderr.read() if client.stderr else ""


def test_a_server_whose_code_changed_refuses_and_stops(tmp_path: Path) -> None:
    """Changing the stamp file is siltlake's code changing under the server."""
    stamp = tmp_path / "stamp"
    stamp.write_text("1")
    server, env, path = probe_server(tmp_path, stamp)
    try:
        served = run(env, "0")
        assert served.returncode == 0 and json.loads(served.stdout)["argv"] == ["0"] and not served.stderr
        stamp.write_text("2")
        refused = run(env, "--version")
        assert refused.returncode == 0 and "version" in refused.stdout  # it ran here, as the `silt` group
        assert "code changed" in refused.stderr
        assert server.wait(timeout=30) == 0
        assert not path.exists()
    finally:
        server.kill()
        server.wait()


def test_messages_carry_any_string_and_the_streams() -> None:
    left, right = socket.socketpair()
    name = b"caf\xe9-\xff.log".decode(errors="surrogateescape")  # a file name that is not UTF-8
    read, write = os.pipe()
    with left, right:
        wire.send(left, {"argv": ["silt", name], "env": {"X": "é"}}, [write])
        message, descriptors = wire.receive(right, 3)
        assert message == {"argv": ["silt", name], "env": {"X": "é"}}
        assert len(descriptors) == 1 and wire.same_user(right)
        os.write(descriptors[0], b"through")
        assert os.read(read, 16) == b"through"
        for descriptor in (*descriptors, read, write):
            os.close(descriptor)
        left.sendall(b"\x00\x00\x00\x10{")
        left.close()
        with pytest.raises(wire.WireError):
            wire.receive(right)


def test_start_refuses_beside_a_server_for_another_python_setup(tmp_path: Path) -> None:
    env = {**os.environ, "SILT_FORKSERVER": str(tmp_path / "run" / "s.sock")}
    other = {**env, "PYTHONHASHSEED": "7"}
    started = run(other, "forkserver", "start")
    assert started.returncode == 0, started.stderr
    try:
        again = run(other, "forkserver", "start")
        assert again.returncode == 0 and "already listens" in again.stderr
        refused = run(env, "forkserver", "start")
        assert refused.returncode != 0 and "another Python setup" in refused.stderr
        shown = run(env, "forkserver", "status")
        assert shown.returncode == 0 and "refuses this one's commands" in shown.stdout
    finally:
        stopped = run(env, "forkserver", "stop")  # any client of its user may stop it
    assert stopped.returncode == 0 and "stopped" in stopped.stderr
    assert run(env, "forkserver", "status").returncode == 1


def test_a_socket_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone may replace a file in it
    env = {**os.environ, "SILT_FORKSERVER": str(shared / "s.sock")}
    started = run(env, "forkserver", "start")
    assert started.returncode != 0 and "another user may replace the socket" in started.stderr, started.stderr
    assert not (shared / "s.sock").exists()


def test_start_imports_the_clients_siltlake_whatever_its_directory(tmp_path: Path) -> None:
    """`start` from a directory holding another siltlake (a checkout) and with a relative socket name."""
    (tmp_path / "siltlake").mkdir()
    (tmp_path / "siltlake" / "__init__.py").write_text('raise SystemExit("the start directory\'s siltlake")\n')
    env = {**os.environ, "SILT_FORKSERVER": "run/s.sock"}
    started = run(env, "forkserver", "start", cwd=tmp_path)
    try:
        assert started.returncode == 0, started.stderr
        assert (tmp_path / "run" / "s.sock").exists()
        shown = run(env, "forkserver", "status", "--json", cwd=tmp_path)
        assert shown.returncode == 0 and json.loads(shown.stdout)["code_current"]
        version = run(env, "--version", cwd=tmp_path)
        assert version.returncode == 0 and "version" in version.stdout and not version.stderr
    finally:
        assert run(env, "forkserver", "stop", cwd=tmp_path).returncode == 0

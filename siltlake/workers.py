"""Small stages on this host's own worker processes instead of a Spark stage (stream.in_driver_bytes).

A Spark stage costs a few hundred milliseconds however little it does, and a process that has not started
Spark pays for the JVM too. A stream wave of a few MB runs here instead: the same task function, on one warm
Python process per core, started once for the life of this process. Processes, not threads: the tasks' value
checks hold the GIL (two threads ran 400 small objects 1.2x slower than two processes).

The workers are plain subprocesses of this interpreter (`python -m siltlake.workers`) that read pickled
calls on stdin and write pickled results on stdout. Not multiprocessing's pools: those import the caller's
main script again in every worker, which an unguarded script calling stream_once would turn into a loop.
A command that has imported what its tasks run forks them instead (fork_workers): nothing to import, the same
pipes (docs/design.md, "A cold `silt stream` forks its workers").
A worker that dies (killed, out of memory) fails the call with WorkersLost; the caller runs the stage on
Spark instead, whose retries and isolation are the general case's.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Protocol

from siltlake.forking import fork

GROUPS_PER_WORKER = 4  # balances objects of uneven size, and reports progress a few times per worker
_HEADER = 8


class WorkersLost(RuntimeError):
    """A worker process died during a call: what it was given has no result."""


def worker_count() -> int:
    """One worker per core this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def run_on_workers(
    function: Callable[[Any], Any],
    items: list[Any],
    weights: list[int] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> list[Any]:
    """Run function over items on the warm worker processes and return the results in item order.

    Items go in size-balanced groups (weights), a few per worker, each worker taking the next group when it is
    done. `function` goes by value, as a Spark task's does (cloudpickle)."""
    if not items:
        return []
    pool = _pool()
    groups = balanced_groups(list(enumerate(items)), weights or [1] * len(items), len(pool.workers) * GROUPS_PER_WORKER)
    return pool.run(function, groups, on_progress)


def balanced_groups(items: list[Any], weights: list[int], groups: int) -> list[list[Any]]:
    """Split items into at most `groups` lists of similar total weight (largest first, to the lightest)."""
    groups = max(1, min(groups, len(items)))
    buckets: list[list[Any]] = [[] for _ in range(groups)]
    loads = [0] * groups
    for index in sorted(range(len(items)), key=lambda i: -weights[i]):
        lightest = loads.index(min(loads))
        buckets[lightest].append(items[index])
        loads[lightest] += max(weights[index], 1)
    return [bucket for bucket in buckets if bucket]


def close_workers() -> None:
    """Stop the worker processes (the next call starts new ones)."""
    global _current
    with _pool_lock:
        pool, _current = _current, None
    if pool is not None:
        pool.close()


def _write_frame(stream: IO[bytes], payload: bytes) -> None:
    stream.write(len(payload).to_bytes(_HEADER, "big"))
    stream.write(payload)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> bytes | None:
    header = stream.read(_HEADER)
    if len(header) < _HEADER:
        return None
    size = int.from_bytes(header, "big")
    payload = stream.read(size)
    return payload if len(payload) == size else None


def _dumps_call(function: Callable[[Any], Any], group: list[tuple[int, Any]]) -> bytes:
    """The pickled call: plain pickle for a module's function (by reference, as cloudpickle would; importing
    PySpark for its cloudpickle costs the caller about 0.4 s), cloudpickle for what plain pickle cannot name (a
    closure, a lambda, a function of __main__), by value as Spark ships a task."""
    if getattr(function, "__module__", None) != "__main__":
        try:
            return pickle.dumps((function, group), pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            pass
    from pyspark import cloudpickle

    return cloudpickle.dumps((function, group), pickle.HIGHEST_PROTOCOL)


class _Process(Protocol):
    """What a worker's process is asked: a spawned one's subprocess.Popen, a forked one's _Forked."""

    pid: int

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class _Worker:
    def __init__(self, process: _Process, requests: IO[bytes], answers: IO[bytes]) -> None:
        self.process = process
        self._requests = requests
        self._answers = answers
        self.called = False

    def call(self, function: Callable[[Any], Any], group: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        self.called = True
        try:
            _write_frame(self._requests, _dumps_call(function, group))
            answer = _read_frame(self._answers)
        except (BrokenPipeError, OSError, ValueError):  # ValueError: its pipe closed by close()
            answer = None
        if answer is None:
            code = self.process.poll()
            raise WorkersLost(
                f"a worker process (pid {self.process.pid}) ended "
                f"{'with code ' + str(code) if code is not None else 'its pipe'} during a task"
            )
        ok, value = pickle.loads(answer)
        if not ok:
            raise value
        return value

    def close(self, kill: bool = False) -> None:
        """End the worker: an idle one when its input closes; `kill`: at once, whatever it is doing (as one that
        never had a call is: it may still be importing what it preloads)."""
        if kill or not self.called:
            self.process.kill()
        for stream in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _spawned(preload: tuple[str, ...]) -> _Worker:
    """A worker that is a new interpreter (`python -m siltlake.workers`), importing `preload` as it starts."""
    environment = dict(os.environ)
    # The caller's import path, so that a source checkout's siltlake (and a test's modules) import as here.
    environment["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
    process = subprocess.Popen(
        [sys.executable, "-m", "siltlake.workers", *preload],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=environment,
    )
    assert process.stdin is not None and process.stdout is not None  # both are pipes (PIPE above)
    return _Worker(process, process.stdin, process.stdout)


class _Forked:
    """A forked worker's process, asked as subprocess.Popen is."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode


def _forked(siblings: list[_Worker]) -> _Worker:
    """A worker that is a fork of this process: it starts with every module this process imported, at once."""
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    # Its siblings' pipes (and the ends of its own that are not its) are closed in the child: a pipe's reader
    # sees its end only when every copy of the writing end is closed.
    theirs = [requests_write, answers_read]
    theirs += [fd for sibling in siblings for fd in (sibling._requests.fileno(), sibling._answers.fileno())]
    pid = fork()
    if pid == 0:  # the worker: never returns
        code = 1
        try:
            for fd in theirs:
                with contextlib.suppress(OSError):
                    os.close(fd)
            for ending in (signal.SIGTERM, signal.SIGHUP):  # a daemon's handlers are for the daemon, not its workers
                signal.signal(ending, signal.SIG_DFL)
            _become_worker()
            with contextlib.suppress(OSError):
                os.dup2(2, 1)  # a task's prints go to stderr, as in a spawned worker
            with os.fdopen(requests_read, "rb") as source, os.fdopen(answers_write, "wb") as sink:
                serve(source, sink)
            code = 0
        finally:
            os._exit(code)  # nothing of the parent's runs here: no atexit, no finalizer closing its connections
    os.close(requests_read)
    os.close(answers_write)
    return _Worker(_Forked(pid), os.fdopen(requests_write, "wb"), os.fdopen(answers_read, "rb"))


class _Pool:
    def __init__(self, size: int, preload: tuple[str, ...], fork: bool = False) -> None:
        self.workers: list[_Worker] = []
        for _ in range(size):
            self.workers.append(_forked(self.workers) if fork else _spawned(preload))
        self.lock = threading.Lock()  # one call at a time: the workers are the host's cores

    def run(
        self,
        function: Callable[[Any], Any],
        groups: list[list[tuple[int, Any]]],
        on_progress: Callable[[int], None] | None,
    ) -> list[Any]:
        with self.lock:
            pending: queue.SimpleQueue = queue.SimpleQueue()
            for group in groups:
                pending.put(group)
            done: queue.SimpleQueue = queue.SimpleQueue()
            stop = threading.Event()

            def serve(worker: _Worker) -> None:
                while not stop.is_set():
                    try:
                        group = pending.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        done.put((True, worker.call(function, group)))
                    except BaseException as exc:  # handed to the calling thread
                        done.put((False, exc))
                        return

            threads = [
                threading.Thread(target=serve, args=(worker,), daemon=True, name="siltlake-worker-feed")
                for worker in self.workers
            ]
            for thread in threads:
                thread.start()
            results: list[tuple[int, Any]] = []
            try:
                for _ in groups:
                    while True:
                        try:  # woken twice a second, so that Ctrl-C reaches this thread at once
                            ok, value = done.get(timeout=0.5)
                            break
                        except queue.Empty:
                            continue
                    if not ok:
                        raise value
                    results.extend(value)
                    if on_progress is not None:
                        on_progress(len(value))
            except BaseException:
                stop.set()
                _discard(self)  # a worker may be mid-task or gone: start afresh next time
                raise
            return [result for _, result in sorted(results, key=lambda pair: pair[0])]

    def close(self, kill: bool = False) -> None:
        for worker in self.workers:
            worker.close(kill)


_current: _Pool | None = None
_pool_lock = threading.Lock()


def _discard(pool: _Pool) -> None:
    """Kill a pool's workers after a failed or interrupted call, and forget it if it is the current one."""
    global _current
    with _pool_lock:
        if _current is pool:
            _current = None
    pool.close(kill=True)


def _pool(preload: tuple[str, ...] = ()) -> _Pool:
    global _current
    with _pool_lock:
        if _current is None or any(worker.process.poll() is not None for worker in _current.workers):
            if _current is not None:  # one of its workers ended between calls: the others go too
                _current.close(kill=True)
            _current = _Pool(worker_count(), preload)
        return _current


def start_workers(*preload: str) -> None:
    """Start the worker processes now, unless they run, each importing the named modules as it starts: their
    imports then overlap with what the caller does before its first call (a cold command's discovery)."""
    _pool(preload)


def fork_workers() -> bool:
    """Start the worker processes as forks of this process, unless they run: they have what it imported, and
    import nothing. Only while this process runs one thread (a fork copies no other thread, and a lock one of them
    held stays held); False when it runs more: the caller then spawns them (start_workers), or the first call does."""
    global _current
    with _pool_lock:
        if _current is not None and all(worker.process.poll() is None for worker in _current.workers):
            return True
        if threading.active_count() > 1 or not hasattr(os, "fork"):
            return False
        if _current is not None:
            _current.close(kill=True)
        _current = _Pool(worker_count(), (), fork=True)
        return True


atexit.register(close_workers)


class _WithoutPandas:
    """An import finder under which pandas is not installed."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError("a siltlake worker process imports no pandas", name=name)


def _become_worker() -> None:
    """What a worker process sets up first, spawned or forked. Ctrl-C reaches the whole process group: the caller
    decides what stops; a worker ends when its pipe does. No task here uses pandas, and pyarrow imports it (0.3 s)
    the first time it converts a Python value when it is installed: a worker says it is not."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "pandas" not in sys.modules:
        sys.meta_path.insert(0, _WithoutPandas())


def serve(source: IO[bytes], sink: IO[bytes]) -> None:
    """A worker: answer pickled calls until the caller closes its end."""
    while (request := _read_frame(source)) is not None:
        function, group = pickle.loads(request)
        try:
            answer: tuple[bool, object] = (True, [(index, function(item)) for index, item in group])
        except Exception as exc:  # raised again in the caller
            answer = (False, exc)
        try:
            payload = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an exception or result that does not pickle: its text
            payload = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc} (in a worker process)")))
        _write_frame(sink, payload)


if __name__ == "__main__":
    _become_worker()
    for module in sys.argv[1:]:
        importlib.import_module(module)
    gc.freeze()  # the modules just imported, as a forked worker's are frozen (siltlake.forking): no call rescans them
    # The answers keep stdout's descriptor to themselves: anything a task prints goes to stderr.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers)

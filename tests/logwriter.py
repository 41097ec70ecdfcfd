"""A program that writes a log, run as its own process by tests/test_logrotate.py: numbered access-log lines (LTSV
or JSON) appended to one file, as a web server or an application writes its log while logrotate turns it over.

Reopening after a rotation, three ways: `signal` reopens the file when SIGUSR1 arrives (nginx's USR1, what a
logrotate postrotate script sends), `watch` reopens it when the name no longer leads to the open file (Python's
WatchedFileHandler, rsyslog), `never` keeps its descriptor (the writer logrotate's copytruncate is for). The file is
opened O_APPEND, as servers open logs: after a copytruncate the next write lands at the new end, not past a hole.

`--chunk N` buffers as a block-buffered program does (stdout redirected to a file): N bytes at a time, cut
mid-line, with `--pause` seconds after each write; the rest at exit. Line n's user_id is n and its time T0 + n s.
With `--count 0` it writes until SIGTERM, finishing the line under way. At exit it prints how many lines it wrote.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import time

T0 = dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.UTC)


def line(number: int, form: str) -> bytes:
    when = (T0 + dt.timedelta(seconds=number)).isoformat().replace("+00:00", "Z")
    if form == "ltsv":
        return f"time:{when}\thost:192.0.2.{number % 250}\tuser_id:{number}\taction:view\tstatus:200\n".encode()
    return json.dumps({"time": when, "user_id": number, "action": "view"}).encode() + b"\n"


class Log:
    def __init__(self, path: str, reopen: str) -> None:
        self.path = path
        self.reopen = reopen
        self.signalled = False
        self.fd = self._open()
        if reopen == "signal":
            signal.signal(signal.SIGUSR1, self._on_signal)

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signalled = True

    def _rotated(self) -> bool:
        if self.reopen == "signal":
            return self.signalled
        if self.reopen == "watch":
            try:
                named = os.stat(self.path)
            except FileNotFoundError:
                return True
            opened = os.fstat(self.fd)
            return (named.st_dev, named.st_ino) != (opened.st_dev, opened.st_ino)
        return False

    def write(self, data: bytes) -> None:
        if self._rotated():
            self.signalled = False
            os.close(self.fd)
            self.fd = self._open()
        while data:
            data = data[os.write(self.fd, data) :]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--format", choices=("ltsv", "json"), default="ltsv")
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--count", type=int, required=True, help="lines to write (0: until SIGTERM)")
    parser.add_argument("--rate", type=float, default=100.0, help="lines per second")
    parser.add_argument("--reopen", choices=("signal", "watch", "never"), default="never")
    parser.add_argument("--chunk", type=int, default=0, help="bytes per write, cut mid-line (0: a line a write)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds after each chunk")
    parser.add_argument("--pidfile")
    args = parser.parse_args(argv)
    if args.pidfile:
        with open(args.pidfile, "w") as file:
            file.write(f"{os.getpid()}\n")
    log = Log(args.path, args.reopen)
    stopping = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    buffered = b""
    started = time.monotonic()
    written = 0
    while not stopping and (args.count == 0 or written < args.count):
        number = args.first + written
        written += 1
        if not args.chunk:
            log.write(line(number, args.format))
            time.sleep(max(0.0, started + written / args.rate - time.monotonic()))
            continue
        buffered += line(number, args.format)
        while len(buffered) >= args.chunk:
            log.write(buffered[: args.chunk])
            buffered = buffered[args.chunk :]
            time.sleep(args.pause)
    if buffered:
        log.write(buffered)
    print(written, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

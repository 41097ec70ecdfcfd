"""siltlake.forking: a fork whose child inherits a frozen heap (its collections never touch what it inherited) and
writes nothing its parent had buffered."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_child_inherits_every_live_object_frozen_and_collects_only_its_own() -> None:
    script = textwrap.dedent(
        """
        import gc, os
        from siltlake.forking import fork
        gc.unfreeze()
        kept = [[index] for index in range(50_000)]  # tracked objects the parent made
        before = len(gc.get_objects())
        pid = fork()
        if pid == 0:
            cycle = []
            cycle.append(cycle)  # garbage of the child's own
            del cycle
            tracked = len(gc.get_objects())
            collected = gc.collect()
            os.write(1, f"child frozen={gc.get_freeze_count()} tracked={tracked} collected={collected}\\n".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(f"parent frozen={gc.get_freeze_count()} before={before}", flush=True)
        """
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    lines = dict(line.split(" ", 1) for line in found.stdout.splitlines())
    child = dict(item.split("=") for item in lines["child"].split())
    parent = dict(item.split("=") for item in lines["parent"].split())
    assert int(child["frozen"]) >= int(parent["before"]) >= 50_000
    assert int(child["tracked"]) < 100, "the child's collector sees only what it made after the fork"
    assert int(child["collected"]) >= 1, "the child's own cycle is still collected"


def test_what_the_parent_buffered_is_written_once() -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from siltlake.forking import fork
        sys.stdout.write("buffered before the fork\\n")  # a pipe: block-buffered, still in the buffer
        pid = fork()
        if pid == 0:
            sys.stdout.write("child\\n")
            sys.stdout.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        sys.stdout.write("parent\\n")
        """
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert found.stdout.splitlines() == ["buffered before the fork", "child", "parent"]

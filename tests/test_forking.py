"""siltlake.forking: a fork whose child inherits a frozen heap (its collections never touch what it inherited) and
writes nothing its parent had buffered; heap_frozen, which keeps a stream round's collections off its caller's heap
for the round only."""

from __future__ import annotations

import gc
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


def test_a_heap_frozen_block_keeps_what_lived_before_it_out_of_collections_and_gives_it_back() -> None:
    script = textwrap.dedent(
        """
        import gc, weakref
        from siltlake.forking import heap_frozen
        class Node: pass
        gc.unfreeze()
        kept = [[index] for index in range(50_000)]
        node = Node(); node.itself = node  # a cycle that is garbage before the block
        dead = weakref.ref(node)
        del node
        with heap_frozen():
            inside, tracked = gc.get_freeze_count(), len(gc.get_objects())
            gc.collect()
            kept_inside = dead() is not None
        after = gc.get_freeze_count()
        gc.collect()
        kept_after = dead() is not None
        print(f"inside={inside} tracked={tracked} kept_inside={kept_inside} after={after} kept_after={kept_after}")
        gc.freeze()  # frozen for good already (as the silt commands are): the block leaves it so
        frozen = gc.get_freeze_count()
        with heap_frozen():
            nested = gc.get_freeze_count()
        print(f"frozen={frozen} nested={nested} still={gc.get_freeze_count()}")
        """
    )
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    first, second = (dict(item.split("=") for item in line.split()) for line in found.stdout.splitlines())
    assert int(first["inside"]) >= 50_000 and int(first["tracked"]) < 1000, first
    assert first["kept_inside"] == "True" and first["after"] == "0" and first["kept_after"] == "False", first
    assert second["frozen"] == second["nested"] == second["still"] != "0", second


def test_a_stream_round_runs_with_the_callers_heap_frozen(plain_deployment) -> None:
    from siltlake.stream import stream_once
    from siltlake.stream.runner import Progress

    class Seen(Progress):
        frozen = -1

        def start(self, total: int) -> None:
            Seen.frozen = gc.get_freeze_count()

    gc.unfreeze()  # what forks earlier in this process froze
    stream_once(plain_deployment, Seen())
    assert Seen.frozen > 0, "the round ran with the caller's objects in the collector's reach"
    assert gc.get_freeze_count() == 0, "the caller's objects were not given back"

"""How siltlake forks a process that goes on running Python (the fork server's sessions and commands, a command's
worker processes): the standard streams are flushed first, so that what the parent buffered is written once, and
every object alive is frozen out of the garbage collector's reach in both processes.

Without the freeze, a child's first full collection writes to the header of every object it inherited and so
copies every page of the parent's heap: one such collection cost 0.11-0.17 s of a forked `silt stream --once`
round (docs/operations.md, "The fork server"). The price is that a reference cycle among the frozen objects is
never collected; reference counting still frees everything else, frozen or not.

heap_frozen does the same for the length of a block only (a stream round's), for a process not frozen already.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def flush_standard_streams() -> None:
    """Flush stdout and stderr, whatever state they are in (closed, gone, a pipe without a reader)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def fork() -> int:
    """os.fork(), with the standard streams flushed and the heap frozen first: 0 in the child, its pid in the
    parent."""
    flush_standard_streams()
    gc.freeze()
    return os.fork()


@contextmanager
def heap_frozen() -> Iterator[None]:
    """Keep the objects alive now out of the cyclic GC's collections while the block runs, then give them back. A full
    collection scans every tracked object, and a stream round over thousands of objects makes one or two: in a
    process that holds a large heap of its own (a notebook's, a bench's) each cost 0.1 s. Nothing is done where
    objects are frozen already (the `silt` commands and the fork server's forks freeze theirs for good) or the GC
    is off. Unfreezing gives back what any freeze made meanwhile (a fork's): the cycles among them become
    collectable again."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()

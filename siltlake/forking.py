"""How siltlake forks a process that goes on running Python (the fork server's sessions and commands, a command's
worker processes): the standard streams are flushed first, so that what the parent buffered is written once, and
every object alive is frozen out of the garbage collector's reach in both processes.

Without the freeze, a child's first full collection writes to the header of every object it inherited and so
copies every page of the parent's heap: one such collection cost 0.11-0.17 s of a forked `silt stream --once`
round (docs/operations.md, "The fork server"). The price is that a reference cycle among the frozen objects is
never collected; reference counting still frees everything else, frozen or not.
"""

from __future__ import annotations

import gc
import os
import sys


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

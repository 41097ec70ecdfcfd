"""How deep a block of JSON lines nests, judged before pyarrow's JSON reader sees it.

pyarrow's reader recurses once per level when it builds the types of fields it infers: a line nested about
17,000 deep overflows an 8 MiB stack and kills the process (a segfault no `except` catches), which would
fail every round that reads the object. So the vectorised decoder takes only blocks whose every line nests at
most MAX_FAST_DEPTH deep; any other block goes to the per-record decoder, where a value too deep for Python is
a bad record with its reason.
"""

from __future__ import annotations

import re

import numpy as np

# Far deeper than any log record's nesting, far below the depth that overflows pyarrow's stack (also on a thread
# with a small stack), and below Python's recursion limit, so the per-record decoder decodes such a line itself.
MAX_FAST_DEPTH = 256

_CHUNK = 1 << 20
_NEWLINE = ord("\n")
_OPENER = ord("{")  # "[" is 0x5b, "{" 0x7b: the two bytes that read as "{" with bit 0x20 set
_SQUARE = ord("[")
# A JSON string as its lexer reads it; in a line that is not JSON it may end elsewhere than the lexer's
# would, but only after the point where the lexer has already failed.
_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"')


def nests_within(block: bytes, bound: int = MAX_FAST_DEPTH, bracketed_lines: int = 0) -> bool:
    """Whether no line of the block nests deeper than `bound` (brackets inside strings are not nesting).

    `bracketed_lines`: lines known to open at least one bracket each (every line one {...}). Then no line opens more
    than the block's openers less the other lines' one each, and a block of flat records needs no further look.
    Else vectorised passes over 1 MiB at a time (kept in cache: twice as fast as whole-block arrays) count each
    line's opening brackets, an upper bound of its depth; only the rare lines holding more than `bound` of them are
    measured exactly, with their strings removed."""
    data = np.frombuffer(block, np.uint8)
    if bracketed_lines:  # two counts: a third of the time of the pass below, and twice bytes.count's speed
        brackets = int(np.count_nonzero(data == _OPENER)) + int(np.count_nonzero(data == _SQUARE))
        if brackets - (bracketed_lines - 1) <= bound:
            return True
    folded = np.empty(min(_CHUNK, len(data)), np.uint8)
    carry = 0  # opening brackets since the last newline, in the chunks before
    measured: set[int] = set()  # the starts of the lines measured exactly
    for start in range(0, len(data), _CHUNK):
        part = data[start : start + _CHUNK]
        np.bitwise_or(part, 0x20, out=folded[: len(part)])
        openers = np.flatnonzero(folded[: len(part)] == _OPENER)
        newlines = np.flatnonzero(part == _NEWLINE)
        # Per line ending in this chunk: its openers (the first line's include the carry); then the open line's.
        before = np.searchsorted(openers, newlines)
        per_line = np.diff(before, prepend=0)
        if len(per_line):
            per_line[0] += carry
            carry = len(openers) - int(before[-1])
        else:
            carry += len(openers)
        crowded = [int(newlines[line]) for line in np.flatnonzero(per_line > bound)]
        if carry > bound and len(openers):  # (with none here, the same line was measured in a chunk before)
            crowded.append(int(openers[-1]))
        for at in crowded:
            line_start = block.rfind(b"\n", 0, start + at) + 1
            if line_start not in measured:
                measured.add(line_start)
                line_end = block.find(b"\n", line_start)
                if _depth(block[line_start : len(block) if line_end < 0 else line_end]) > bound:
                    return False
    return True


def _depth(line: bytes) -> int:
    """The deepest nesting of one line, strings aside (for a line that is not JSON, at least its depth)."""
    structure = np.frombuffer(_STRING.sub(b"", line), np.uint8)
    steps = np.zeros(len(structure), np.int32)
    steps[(structure | 0x20) == _OPENER] = 1
    steps[(structure | 0x20) == ord("}")] = -1
    return int(np.cumsum(steps).max(initial=0))

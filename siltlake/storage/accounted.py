"""What a stream daemon remembers between discovery rounds of a local staging root: per directory, the file names a
completed round accounted for, so that a later round `stat`s only the names it has not seen there
(docs/design.md, "A round costs what is new in a changed directory")."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


def directory_identity(found: os.stat_result) -> tuple[int, int, int]:
    """A directory's device, inode and link count: another directory under the same path, or one that gained or
    lost a subdirectory (a name that was a file may now be one), does not take the record of the one before."""
    return found.st_dev, found.st_ino, found.st_nlink


# What separates a directory's names in its record: no file name holds it.
SEPARATOR = "/"


def names_added(listed: str, recorded: str, most: int) -> list[str] | None:
    """The names of a directory's listing (joined by SEPARATOR) that its record (joined the same way) lacks, when
    the record's names appear in the listing in the record's order; else None (a recorded name went, the order
    differs, or more than `most` lie between recorded names; those after the last cost one split). A record kept
    in listing order passes: ext4 and xfs list a directory in hash order and tmpfs in creation order, and a new
    entry leaves the others' order as it was. Runs of equal text are skipped whole (a galloping search for the
    first difference), so 7,000 names with five new cost about a seventh of splitting the record and taking a
    set difference (bench/dir_listing_bench.py; docs/design.md, "A record in listing order")."""
    if not recorded:
        return listed.split(SEPARATOR) if listed else []
    # Both end with a separator, so every name is followed by one and a name's end is found by one search.
    new, old = listed + SEPARATOR, recorded + SEPARATOR
    at_new = at_old = 0
    added: list[str] = []
    while True:
        same = _common_length(new, at_new, old, at_old)
        if at_old + same == len(old):  # every recorded name found: the rest of the listing is new
            if at_new + same < len(new):
                added.extend(new[at_new + same : -1].split(SEPARATOR))
            return added
        if at_new + same == len(new) or len(added) == most:
            return None
        # The listing's name where the two part is one the record lacks here, and so lacks anywhere: names are
        # unique in a directory, and the record's later names all lie later in the listing.
        boundary = new.rfind(SEPARATOR, at_new, at_new + same)
        start = boundary + 1 if boundary >= 0 else at_new
        end = new.index(SEPARATOR, start)
        added.append(new[start:end])
        at_old += start - at_new
        at_new = end + 1


def _common_length(a: str, at_a: int, b: str, at_b: int) -> int:
    """How many characters a[at_a:] and b[at_b:] share from their start: doubling steps, then a binary search."""
    limit = min(len(a) - at_a, len(b) - at_b)
    same, step = 0, 512
    while same < limit:
        size = min(step, limit - same)
        if a.startswith(b[at_b + same : at_b + same + size], at_a + same):
            same += size
            step *= 2
            continue
        equal, differs = 0, size  # a prefix of `equal` characters matches, one of `differs` does not
        while differs - equal > 1:
            middle = (equal + differs) // 2
            if a.startswith(b[at_b + same : at_b + same + middle], at_a + same):
                equal = middle
            else:
                differs = middle
        return same + equal
    return same


def holds(known: str, name: str) -> bool:
    """Whether a record's joined names hold `name` (one search of the joined text, no split)."""
    start = known.find(name)
    while start >= 0:
        end = start + len(name)
        if (start == 0 or known[start - 1] == SEPARATOR) and (end == len(known) or known[end] == SEPARATOR):
            return True
        start = known.find(name, start + 1)
    return False


@dataclass(frozen=True)
class DirectoryNames:
    """One directory as a walk saw it: its identity, its newest time (max of mtime and ctime, nanoseconds) and,
    when the walk read its entries, the names of its files that the round accounts for, joined by SEPARATOR
    (None: not read). One string, not a set: a million names take about 20 MB instead of 130, and a round
    splits it back into names once (a C loop, about 60 ns a name)."""

    identity: tuple[int, int, int]
    newest_ns: int
    files: str | None = None

    @property
    def count(self) -> int:
        return self.files.count(SEPARATOR) + 1 if self.files else 0


class AccountedNames:
    """Per directory path, the file names that a completed round listed there: each was registered by that round
    (or recorded unknown, held to settle, or judged as a tail) or was older than the cursor the round read from,
    which an earlier completed listing stored. A name in it is accounted for whatever happens to its file later:
    a re-put or append under it is left to the rolling sweep and the watched files, as in an unchanged directory.
    A stream daemon keeps it in memory; a one-off run reads it from the catalog and stores it back
    (stream/names.py)."""

    def __init__(self, directories: dict[str, DirectoryNames] | None = None) -> None:
        self._directories: dict[str, DirectoryNames] = dict(directories or {})

    def recorded(self) -> dict[str, DirectoryNames]:
        """The record by directory path (a copy)."""
        return dict(self._directories)

    def files(self, path: str, found: os.stat_result) -> str | None:
        """The accounted file names of the directory at path, joined by SEPARATOR, if the record is of this very
        directory."""
        known = self._directories.get(path)
        if known is None or known.files is None or known.identity != directory_identity(found):
            return None
        return known.files

    def close(self) -> None:
        """Let go of what the record holds besides its names (a watch's descriptor)."""

    def start_walk(self) -> None:
        """A walk starts (a record that learns from notifications reads them here: storage/dirwatch.py)."""

    def take_modified(self) -> list[str]:
        """The paths of files written to in place since the last call, as notifications told (none here)."""
        return []

    def arm(self, path: str) -> None:
        """A leaf directory is about to be listed for the record (one that learns from notifications watches it)."""

    def arrived(self, path: str) -> set[str] | None:
        """The names new in a recorded directory since its listing, when known without listing it; else None."""
        return None

    def lacking(self, path: str, known: str, names: set[str]) -> set[str]:
        """Of `names` (arrivals: only a record that answers `arrived` is asked), those that `known`, the record of
        the directory at `path` joined, does not hold; a record that learns from notifications keeps an index."""
        return {name for name in names if not holds(known, name)}

    def keep(self, walked: dict[str, DirectoryNames], now_ns: int, window_ns: int) -> None:
        """Take a completed round's walk: the names of the directories it read replace theirs; a directory the walk
        did not find (removed) or that has not changed for window_ns (its day is over) is forgotten."""
        horizon = now_ns - window_ns
        kept: dict[str, DirectoryNames] = {}
        for path, seen in walked.items():
            if seen.newest_ns < horizon:
                continue
            known = seen if seen.files is not None else self._directories.get(path)
            if known is not None and known.files is not None and known.identity == seen.identity:
                kept[path] = known
        self._directories = kept

    @property
    def directories(self) -> int:
        return len(self._directories)

    @property
    def names(self) -> int:
        return sum(known.count for known in self._directories.values())

    def footprint(self) -> int:
        """Bytes the record's names take (what a daemon holds for it; reported by the benchmarks)."""
        return sum(sys.getsizeof(known.files) for known in self._directories.values() if known.files is not None)

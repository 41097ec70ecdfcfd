"""What a stream daemon remembers between discovery rounds of a local staging root: per directory, the file names a
completed round accounted for, so that a later round `stat`s only the names it has not seen there
(docs/design.md, "Issue 28: a round costs what is new in a changed directory")."""

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

    def arm(self, path: str) -> None:
        """A leaf directory is about to be listed for the record (one that learns from notifications watches it)."""

    def arrived(self, path: str) -> set[str] | None:
        """The names new in a recorded directory since its listing, when known without listing it; else None."""
        return None

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

"""A stream daemon's record of names that Linux's inotify keeps current: a changed directory the daemon read before
is not listed again, its new names come from the kernel's notifications (docs/design.md, "A daemon learns a
directory's new names from inotify").

A directory is watched from just before a round lists it, so what the listing missed the notifications name. A
round reads the queue once, when its walk starts; a name that arrived since the directory's recorded listing and
was not removed again is an arrival. The record answers with arrivals only while nothing may have been missed:
an overflowed queue, a recorded name removed or moved away, or the directory itself moved or removed, and the
directory is listed again (its watch stays). Only directories without subdirectories are answered this way: the
walk must still see every subdirectory of one that has them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import struct
from dataclasses import dataclass, field

import numpy as np

from siltlake.storage.accounted import SEPARATOR, AccountedNames, DirectoryNames, holds

__all__ = ["WatchedNames", "inotify_available"]

# <sys/inotify.h>
IN_MODIFY, IN_CLOSE_WRITE = 0x2, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW = 0x01000000, 0x02000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
# IN_MODIFY and IN_CLOSE_WRITE: a file appended to in place is looked at by the next round, whatever the listing
# (docs/design.md, "Files written in place and appended to").
_MASK = (
    IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_MODIFY
    | IN_CLOSE_WRITE
)
_LOST = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
_EVENT = struct.Struct("iIII")
_READ_BYTES = 1 << 16
# Watches one daemon holds at most (the kernel's fs.inotify.max_user_watches is shared by the host's processes):
# the directories a daemon reads are its recent days', a few per host.
MAX_WATCHES = 4096


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    return libc if hasattr(libc, "inotify_init1") else None


def inotify_available() -> bool:
    """Whether this system has inotify (Linux)."""
    return _libc() is not None


@dataclass
class _NameIndex:
    """The sorted hashes of the names of one record text: a name whose hash is absent is not in the text."""

    text: str
    hashes: np.ndarray

    @classmethod
    def of(cls, text: str) -> _NameIndex:
        return cls(text, np.sort(_hashes(text.split(SEPARATOR) if text else [])))

    def grown_to(self, text: str) -> _NameIndex | None:
        """The index of `text` when it is this one's text with names appended (a round's new files), else None."""
        if text == self.text:  # the same object at once (CPython compares identity first)
            return self
        if self.text and not (text.startswith(self.text) and text[len(self.text) : len(self.text) + 1] == SEPARATOR):
            return None
        tail = text[len(self.text) + 1 :] if self.text else text
        return _NameIndex(text, np.sort(np.concatenate([self.hashes, _hashes(tail.split(SEPARATOR))])))

    def may_hold(self, names: list[str]) -> np.ndarray:
        """Per name, whether its hash is among the text's (True: maybe in it; False: certainly not)."""
        wanted = _hashes(names)
        if not len(self.hashes):
            return np.zeros(len(names), dtype=bool)
        at = np.minimum(np.searchsorted(self.hashes, wanted), len(self.hashes) - 1)
        return self.hashes[at] == wanted


def _hashes(names: list[str]) -> np.ndarray:
    return np.fromiter(map(hash, names), dtype=np.int64, count=len(names))


@dataclass
class _Watched:
    path: str
    complete: bool  # whether arrived is all that is new since the recorded names (else: list the directory again)
    arrived: set[str] = field(default_factory=set)  # names created or moved in since the recorded listing
    modified: set[str] = field(default_factory=set)  # names written to since the last take_modified()


class WatchedNames(AccountedNames):
    """AccountedNames whose directories are watched: `arrived(path)` names what is new in a changed directory
    without listing it. Falls back to listing (the base class) wherever a watch cannot be set."""

    def __init__(self) -> None:
        super().__init__()
        self._libc = _libc()
        self._fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC) if self._libc is not None else -1
        self._by_descriptor: dict[int, _Watched] = {}
        self._by_path: dict[str, int] = {}
        # Per watched directory that had arrivals, an index of its record's names: an arrival is looked for in the
        # record by its hash (8 bytes a name), not by a search of the record's text (about 100 µs a name at 7,000).
        self._indexes: dict[str, _NameIndex] = {}

    @property
    def watching(self) -> int:
        return len(self._by_path)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._by_descriptor.clear()
        self._by_path.clear()
        self._indexes.clear()

    def start_walk(self) -> None:
        """Take in what the kernel queued since the last walk: once a walk, before it reads any directory."""
        while self._fd >= 0:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                descriptor, mask, _, length = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = os.fsdecode(data[offset : offset + length].rstrip(b"\0"))
                offset += length
                self._take(descriptor, mask, name)

    def _take(self, descriptor: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            for each in self._by_descriptor.values():
                each.complete = False
            return
        watched = self._by_descriptor.get(descriptor)
        if watched is None:
            return
        if mask & _LOST:
            watched.complete = False
            if mask & IN_IGNORED:  # the kernel dropped the watch (the directory went): set again when next read
                self._by_descriptor.pop(descriptor, None)
                self._by_path.pop(watched.path, None)
        elif mask & (IN_MODIFY | IN_CLOSE_WRITE):
            watched.modified.add(name)
        elif mask & (IN_CREATE | IN_MOVED_TO):
            watched.arrived.add(name)
        elif mask & (IN_DELETE | IN_MOVED_FROM):
            if name in watched.arrived:
                watched.arrived.discard(name)  # a shipper's temporary name renamed into place, say
            else:
                watched.complete = False  # a recorded name went: only a listing says which names remain

    def arm(self, path: str) -> None:
        """Watch a directory before it is listed for the record. A new watch answers only once a completed round
        has recorded a listing taken after it (keep): what the record held before may predate the watch."""
        libc = self._libc  # None only when _fd < 0
        if self._fd < 0 or libc is None or path in self._by_path or len(self._by_path) >= MAX_WATCHES:
            return
        descriptor = libc.inotify_add_watch(self._fd, os.fsencode(path), _MASK | IN_DONT_FOLLOW)
        if descriptor < 0 or descriptor in self._by_descriptor:  # no watch left, or the same directory by another path
            return
        self._by_descriptor[descriptor] = _Watched(path, complete=False)
        self._by_path[path] = descriptor

    def take_modified(self) -> list[str]:
        """The paths of the files written to in watched directories since the last call (read by start_walk)."""
        found = []
        for watched in self._by_descriptor.values():
            found += [os.path.join(watched.path, name) for name in watched.modified]
            watched.modified.clear()
        return found

    def arrived(self, path: str) -> set[str] | None:
        """The names that arrived in the directory since its recorded listing, if nothing can have been missed."""
        descriptor = self._by_path.get(path)
        if descriptor is None:
            return None
        watched = self._by_descriptor[descriptor]
        return watched.arrived if watched.complete else None

    def lacking(self, path: str, known: str, names: set[str]) -> set[str]:
        """Of the arrivals `names`, those the record lacks: a name whose hash the record's index does not hold is
        new; one whose hash it holds is looked for in the text (a re-put under a recorded name, or a collision)."""
        index = self._indexes.get(path)
        index = index.grown_to(known) if index is not None else None
        if index is None:
            index = _NameIndex.of(known)
        self._indexes[path] = index
        ordered = list(names)
        return {
            name
            for name, maybe in zip(ordered, index.may_hold(ordered), strict=True)
            if not maybe or not holds(known, name)
        }

    def keep(self, walked: dict[str, DirectoryNames], now_ns: int, window_ns: int) -> None:
        super().keep(walked, now_ns, window_ns)
        for path, seen in walked.items():
            descriptor = self._by_path.get(path)
            if descriptor is not None and seen.files is not None:
                # This round read the directory after its watch was set (a listing or the arrivals): the record
                # holds every name queued before the walk began; what came after waits in the kernel's queue.
                watched = self._by_descriptor[descriptor]
                watched.arrived.clear()
                watched.complete = True
        for path, index in list(self._indexes.items()):  # each follows its record, or goes (the record was listed anew)
            known = self._directories.get(path)
            grown = index.grown_to(known.files) if known is not None and known.files is not None else None
            if grown is None or path not in self._by_path:
                del self._indexes[path]
            else:
                self._indexes[path] = grown
        for path in [path for path in self._by_path if path not in self._directories]:
            descriptor = self._by_path.pop(path)
            self._by_descriptor.pop(descriptor, None)
            if self._libc is not None:  # always: a watch was added through it
                self._libc.inotify_rm_watch(self._fd, descriptor)  # forgotten (aged, gone): nothing more to learn

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:  # a record dropped without close(): its descriptor goes with it
            self.close()

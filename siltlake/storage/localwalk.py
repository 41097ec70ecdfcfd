"""Walks of a local staging root (Storage.list_changed and Storage.sweep): the directories that changed since a
time, and the rolling sweep's slices in key order (docs/design.md, "Discovery reads what is new")."""

from __future__ import annotations

import bisect
import datetime as dt
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from siltlake.storage.accounted import SEPARATOR, AccountedNames, DirectoryNames, directory_identity, names_added

__all__ = ["ChangedListing", "ObjectInfo", "SweptListing", "arrival_ns", "listed_mtime", "sweep_slice", "walk_changed"]


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the storage root, '/'-separated
    size: int
    mtime: dt.datetime | None


@dataclass
class ChangedListing:
    """What Storage.list_changed found: the files that may be new, and what it took to find them."""

    objects: list[ObjectInfo] = field(default_factory=list)
    entries: int = 0  # file entries examined (those of changed directories)
    read: int = 0  # directories whose entries were read
    skipped: int = 0  # directories not read: unchanged and without subdirectories
    remembered: int = 0  # of the entries, names not `stat`ed: the record of earlier rounds accounted for them
    directories: dict[str, DirectoryNames] = field(default_factory=dict)  # every directory walked, by path


@dataclass
class SweptListing:
    """What Storage.sweep read: up to its limit of files in key order, and where the next slice starts."""

    objects: list[ObjectInfo] = field(default_factory=list)
    last_key: str | None = None  # the greatest key read (None: none)
    complete: bool = False  # the walk reached the end of the root
    unchanged: int = 0  # files read but not returned: unchanged since a listing looked them all up


def walk_changed(base: str, since_ns: int, accounted: AccountedNames | None = None) -> ChangedListing:
    """The files of a local root that may have appeared since since_ns (nanoseconds of the file system's
    clock): a superset of the files added, moved in or replaced since then, found without listing the
    entries of directories that did not change. Keys and the files chosen match list()'s (symbolic links
    to files and directories are followed, as pyarrow does; other entries are skipped).

    A directory whose own mtime and ctime are before since_ns had no entry added, removed or renamed
    since: its files are not listed. Its subdirectories are still visited (their mtimes are their own),
    unless its link count says it has none (2 on ext4, xfs and tmpfs; file systems that report 1, such as
    btrfs, are read). In a changed directory, a file is returned when max(mtime, ctime) >= since_ns: a
    rename or link updates the ctime, so an object moved in with an old mtime still counts. A
    subdirectory that appeared since (moved in whole, its files' times all old) is returned entirely.

    With `accounted` (a stream daemon's record of its earlier rounds), a changed directory it holds names
    of is read by name alone, and only the names not in the record are `stat`ed and may be returned: a
    file under a recorded name is left to the rolling sweep (docs/design.md, "A round costs what
    is new in a changed directory"). The listing's `directories` are what the record keeps of this walk."""
    result = ChangedListing()
    try:
        top = os.stat(base)
    except FileNotFoundError:  # a missing root lists nothing, as list() does
        return result
    # Each directory carries the identities of the directories above it: a link back up the tree is not
    # followed forever. Two paths to one directory are both walked (their keys differ, as in list()).
    pending: list[tuple[str, str, os.stat_result, bool, frozenset]] = [
        (base, "", top, False, frozenset([(top.st_dev, top.st_ino)]))
    ]
    if accounted is not None:
        accounted.start_walk()
    while pending:
        path, prefix, found, fresh, above = pending.pop()
        newest = max(found.st_mtime_ns, found.st_ctime_ns)
        changed = fresh or newest >= since_ns
        result.directories[path] = DirectoryNames(directory_identity(found), newest)
        if not changed and found.st_nlink == 2:
            result.skipped += 1  # no subdirectory, and no entry changed
            continue
        result.read += 1
        known = accounted.files(path, found) if accounted is not None and changed else None
        # A leaf directory (no subdirectory to find) whose record learns its new names from notifications is not
        # listed: only what arrived is looked at (storage/dirwatch.py).
        leaf = found.st_nlink == 2
        files: str | None
        if accounted is not None and known is not None:
            arrived = accounted.arrived(path) if leaf and not fresh else None
            if arrived is not None:
                files = _read_arrivals(
                    path, prefix, since_ns, known, accounted.lacking(path, known, arrived), above, pending, result
                )
            else:
                if leaf:
                    accounted.arm(path)
                files = _read_by_name(path, prefix, since_ns, fresh, known, above, pending, result)
        else:
            if leaf and accounted is not None and changed:
                accounted.arm(path)
            files = _read_entries(
                path,
                prefix,
                since_ns,
                changed,
                fresh,
                above,
                pending,
                result,
                collect=accounted is not None and changed,
            )
        if files is not None:
            result.directories[path] = DirectoryNames(directory_identity(found), newest, files)
    return result


def sweep_slice(base: str, after: str | None, limit: int, unchanged_before_ns: int | None = None) -> SweptListing:
    """Up to `limit` files of a local root whose keys sort after `after` (None: from the start), in key order
    (code points, an object store's UTF-8 byte order), with list()'s keys, sizes, mtimes and choice of entries
    (links to files and directories followed, a link back up the tree not). Directories whose keys all sort at
    or before `after` are not read. A file whose arrival (max(mtime, ctime), a link's own times included) is
    before unchanged_before_ns is counted in `unchanged`, not returned: it was there, as it is, when a completed
    listing looked every file up (stream/discover.py). A slice costs its `limit` files, not the size of the
    directory it resumes in: a large directory's sorted entries are kept while it is unchanged (_sorted_entries)."""
    result = SweptListing()
    try:
        top = os.stat(base)
    except FileNotFoundError:
        result.complete = True
        return result
    # A stack of directories being walked, the innermost last: each its entries in key order (a directory sorts
    # as its name and a '/', so that the walk yields keys in key order: "a-b" before "a/x", "a/x" before "a0"),
    # the position of the next one, and the identities of the directories above it.
    # Paths are joined by hand ("/" after a directory path without its trailing one): os.path.join per file was a
    # sixth of a slice's walk under a profiler, and a check pass walks millions of files.
    frames: list[list] = [
        [*_entries_after(base, "", top, after), frozenset([(top.st_dev, top.st_ino)]), base.rstrip("/"), ""]
    ]
    while frames:
        frame = frames[-1]
        entries, position, above, directory, prefix = frame
        if position == len(entries):
            frames.pop()
            continue
        frame[1] = position + 1
        _, name, is_dir, is_link = entries[position]
        path, key = f"{directory}/{name}", prefix + name
        try:
            found = os.stat(path)
            own = os.lstat(path) if is_link and not is_dir else found
        except OSError:  # removed during the walk, or a dangling link
            continue
        if is_dir:
            identity = (found.st_dev, found.st_ino)
            if identity not in above:
                frames.append([*_entries_after(path, key + "/", found, after), above | {identity}, path, key + "/"])
            continue
        if not stat.S_ISREG(found.st_mode):  # a kept entry's link now leads elsewhere: list() would not show it
            continue
        if len(result.objects) + result.unchanged == limit:
            return result
        result.last_key = key
        if unchanged_before_ns is not None and arrival_ns(found, own) < unchanged_before_ns:
            result.unchanged += 1
            continue
        result.objects.append(ObjectInfo(key, found.st_size, listed_mtime(found.st_mtime_ns)))
    result.complete = True
    return result


def _entries_after(path: str, prefix: str, found: os.stat_result, after: str | None) -> tuple[list, int]:
    """A directory's sorted entries and the position of the first that may hold keys after `after`."""
    entries, orders = _sorted_entries(path, prefix, found)
    if after is None:
        return entries, 0
    start = bisect.bisect_right(orders, after)
    # Of the entries sorting at or before `after`, the last may be the directory that holds it: walked too.
    if start and entries[start - 1][2] and after.startswith(orders[start - 1]):
        start -= 1
    return entries, start


# A rolling sweep's slice ends inside a large directory (a host's day of objects) and the next slice resumes there:
# the directory's sorted entries are kept for it while the directory stays as it was (same inode, mtime and ctime:
# no entry added, removed or renamed), for directories of at least _KEPT_FROM entries, the newest two (about 13 MB
# for 50,000 entries).
_SORTED: OrderedDict[tuple[str, str], tuple[tuple, list, list]] = OrderedDict()
_SORTED_LOCK = threading.Lock()  # a round's slice runs on its commit thread; several deployments may share a process
_KEPT_DIRECTORIES = 2
_KEPT_FROM = 1024
_SETTLED_NS = 1_000_000_000  # a directory changed within this before its read may change again in the same tick


def _sorted_entries(path: str, prefix: str, found: os.stat_result) -> tuple[list, list]:
    """A directory's files and subdirectories as (order, name, is_dir, is_link) in key order, and the orders."""
    stamp = (found.st_dev, found.st_ino, found.st_mtime_ns, found.st_ctime_ns)
    with _SORTED_LOCK:
        kept = _SORTED.get((path, prefix))
        if kept is not None and kept[0] == stamp:
            _SORTED.move_to_end((path, prefix))
            return kept[1], kept[2]
    read_at = time.time_ns()
    try:
        listed = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return [], []  # removed during the walk (or unreadable): list() would not show its files either
    entries = []
    for entry in listed:
        try:
            is_dir = entry.is_dir()
            if not is_dir and not entry.is_file():
                continue
            is_link = entry.is_symlink()
        except OSError:
            continue
        key = prefix + entry.name
        entries.append((key + "/" if is_dir else key, entry.name, is_dir, is_link))
    entries.sort()
    orders = [entry[0] for entry in entries]
    if len(entries) >= _KEPT_FROM and max(found.st_mtime_ns, found.st_ctime_ns) < read_at - _SETTLED_NS:
        with _SORTED_LOCK:
            _SORTED[(path, prefix)] = (stamp, entries, orders)
            while len(_SORTED) > _KEPT_DIRECTORIES:
                _SORTED.popitem(last=False)
    return entries, orders


def arrival_ns(found: os.stat_result, own: os.stat_result) -> int:
    """When a local file arrived in the root: max(mtime, ctime) of the file (`found`, through any link) and of the
    entry itself (`own`, its lstat: a new link to an old file or directory is new; a rename sets the ctime)."""
    return max(found.st_mtime_ns, found.st_ctime_ns, own.st_mtime_ns, own.st_ctime_ns)


def listed_mtime(nanoseconds: int) -> dt.datetime:
    """A local file's mtime as pyarrow's listing gives it (seconds as a double, rounded to the microsecond; not
    truncated): a send_time stored from one listing compares equal with another's (no spurious re-put)."""
    return dt.datetime.fromtimestamp(nanoseconds / 1e9, dt.UTC)


def _read_entries(
    path: str,
    prefix: str,
    since_ns: int,
    changed: bool,
    fresh: bool,
    above: frozenset,
    pending: list,
    result: ChangedListing,
    collect: bool,
) -> str | None:
    """Read a directory's entries (list_changed): queue its subdirectories, and in a changed one `stat` each file
    and return those that may be new. With collect, the names of the files it examined (for the record)."""
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None  # removed during the walk (or unreadable): list() would not show its files either
    files: list[str] | None = [] if collect else None
    for entry in entries:
        try:
            is_dir = entry.is_dir()
            if not is_dir and not (changed and entry.is_file()):
                continue
            found = entry.stat()
            newest = arrival_ns(found, entry.stat(follow_symlinks=False) if entry.is_symlink() else found)
        except OSError:  # removed during the walk, or a dangling link
            continue
        key = prefix + entry.name
        if is_dir:
            _descend(pending, entry.path, key, found, fresh or (changed and newest >= since_ns), above)
            continue
        result.entries += 1
        if files is not None:
            files.append(entry.name)
        if fresh or newest >= since_ns:
            result.objects.append(ObjectInfo(key, found.st_size, listed_mtime(found.st_mtime_ns)))
    return None if files is None else SEPARATOR.join(files)


def _read_by_name(
    path: str,
    prefix: str,
    since_ns: int,
    fresh: bool,
    known: str,
    above: frozenset,
    pending: list,
    result: ChangedListing,
) -> str | None:
    """Read a changed directory of which the record holds names (list_changed): its names alone (no entry
    objects, no `stat`), then `stat` only the names not in the record; in a fresh one (its parent and it
    changed: moved in, or a live directory whose sibling appeared) each of those is returned. Returns the names
    to record, in listing order: those listed, less the subdirectories and what is no file."""
    try:
        listed = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    joined = SEPARATOR.join(listed)
    unseen = names_added(joined, known, most=16 + known.count(SEPARATOR) // 64)
    if unseen is None:  # the record is not in this listing's order (or much changed): compared as sets
        unseen = list(set(listed).difference(known.split(SEPARATOR) if known else ()))
    kept = len(listed) - len(unseen)
    result.remembered += kept
    result.entries += kept
    new_files = _look_at(path, prefix, unseen, since_ns, fresh, above, pending, result)
    if len(new_files) == len(unseen):
        return joined
    unrecorded = set(unseen).difference(new_files)
    return SEPARATOR.join([name for name in listed if name not in unrecorded])


def _read_arrivals(
    path: str,
    prefix: str,
    since_ns: int,
    known: str,
    unseen: set[str],
    above: frozenset,
    pending: list,
    result: ChangedListing,
) -> str:
    """Read a changed leaf directory from its record and the names notifications say arrived since that the record
    lacks (list_changed): `stat` only those. Returns the names to record: the record's and the new files'."""
    count = known.count(SEPARATOR) + 1 if known else 0
    result.remembered += count
    result.entries += count
    new_files = _look_at(path, prefix, sorted(unseen), since_ns, False, above, pending, result)
    return SEPARATOR.join([known, *new_files] if known else new_files)


def _look_at(
    path: str,
    prefix: str,
    names: Iterable[str],
    since_ns: int,
    fresh: bool,
    above: frozenset,
    pending: list,
    result: ChangedListing,
) -> list[str]:
    """`stat` names of a directory the record does not hold: queue the subdirectories, return the regular files
    (and among the objects those that may be new: in a fresh directory all of them)."""
    files = []
    for name in names:
        entry_path = os.path.join(path, name)
        try:
            own = os.lstat(entry_path)
            found = os.stat(entry_path) if stat.S_ISLNK(own.st_mode) else own
        except OSError:  # removed since it was listed or arrived, or a dangling link: looked at again next round
            continue
        newest = arrival_ns(found, own)
        key = prefix + name
        if stat.S_ISDIR(found.st_mode):
            _descend(pending, entry_path, key, found, fresh or newest >= since_ns, above)
            continue
        if not stat.S_ISREG(found.st_mode):
            continue
        result.entries += 1
        files.append(name)
        if fresh or newest >= since_ns:
            result.objects.append(ObjectInfo(key, found.st_size, listed_mtime(found.st_mtime_ns)))
    return files


def _descend(pending: list, path: str, key: str, found: os.stat_result, fresh: bool, above: frozenset) -> None:
    """Queue a subdirectory for list_changed's walk, unless it is one of the directories above (a link back up)."""
    identity = (found.st_dev, found.st_ino)
    if identity not in above:
        pending.append((path, key + "/", found, fresh, above | {identity}))

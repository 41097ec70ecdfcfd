"""Opening a file under a local root so that checking where it leads and reading it are one act.

A key checked at discovery can be swapped before it is read (for a symbolic link out of the root, a FIFO
that blocks its reader forever, a directory). So the open itself walks from the root's directory one
component at a time with O_NOFOLLOW, resolving each symbolic link by hand (one whose target stays inside
the root is followed, as discovery allows), and keeps the file only if fstat says it is a regular file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from typing import BinaryIO

from siltlake.errors import SiltError

MAX_LINKS = 40  # as the kernel's own limit on links in one path
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class UnsafeKey(SiltError, ValueError):
    """An object key that would reach outside its storage root."""


class Refused(UnsafeKey):
    """A key that, when it is opened, does not lead to a regular file inside its root."""


def open_regular_file(root: str, key: str) -> BinaryIO:
    """The regular file at a '/'-separated key under a local root directory, open for reading.

    Raises Refused for a link out of the root, a parent that is not a directory, or anything but a regular
    file; FileNotFoundError when nothing is there; OSError for the file system's own failures."""
    directories = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]  # the root may be a link
    real_root: str | None = None  # resolved only for an absolute link's target: most opens meet no link
    todo = [part for part in reversed(key.split("/")) if part not in ("", ".")]
    links = 0
    try:
        while todo:
            name = todo.pop()
            if name == "..":
                if len(directories) == 1:  # keys have no '..': this one came from a link's target
                    raise _leaves(key, root)
                os.close(directories.pop())
                continue
            try:
                fd = os.open(name, _DIRECTORY if todo else _FILE, dir_fd=directories[-1])
            except OSError as exc:
                target = _link_target(exc, name, directories[-1])
                if target is None:
                    if exc.errno == errno.ENOTDIR:
                        raise Refused(f"a parent of {key!r} is not a directory (any more); refused") from None
                    raise
                links += 1
                if links > MAX_LINKS:
                    raise Refused(f"{key!r} goes through more than {MAX_LINKS} symbolic links; refused") from None
                if os.path.isabs(target):
                    real_root = real_root or os.path.realpath(root)
                    inside = os.path.relpath(target, real_root)
                    if inside == ".." or inside.startswith("../"):
                        raise _leaves(key, root) from None
                    while len(directories) > 1:
                        os.close(directories.pop())
                    target = inside
                todo.extend(part for part in reversed(target.split("/")) if part not in ("", "."))
                continue
            if todo:
                directories.append(fd)
                continue
            return _regular(fd, key)
        raise Refused(f"{key!r} names the root directory itself, not a file; refused")
    finally:
        for fd in directories:
            os.close(fd)


def _leaves(key: str, root: str) -> Refused:
    return Refused(f"{key!r} is a symbolic link (or lies under one) that leads out of the root {root}; refused")


def _link_target(exc: OSError, name: str, directory: int) -> str | None:
    """The target of the symbolic link an O_NOFOLLOW open refused (ELOOP; ENOTDIR with O_DIRECTORY), else None."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
        return None
    try:
        return os.readlink(name, dir_fd=directory)
    except OSError:  # EINVAL: not a link after all (a file where a directory was expected)
        return None


def _regular(fd: int, key: str) -> BinaryIO:
    """The open descriptor as a blocking file object if it is a regular file; else closed and refused."""
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise Refused(f"{key!r} is {kind}, not a regular file; refused")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return open(fd, "rb", buffering=0)  # the caller closes it
    except BaseException:
        os.close(fd)
        raise

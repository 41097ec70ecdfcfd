"""What makes a local staging file the same file under another name, or a copy of bytes already loaded
(docs/design.md, "Files written in place and appended to"): its device:inode, confirmed by a CRC-32 of its first
bytes (of the decompressed stream for a gzip file), and the CRC-32 of the bytes before a position's consumed end.
Only reads files; the decisions are stream/rotation.py's."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from stat import S_ISREG
from typing import BinaryIO

from siltlake.records.framing import GZIP_MAGIC
from siltlake.records.inflate import INFLATE_ERRORS, gzip_inflater, head_inflater

# The first bytes whose CRC-32 confirms a file's identity: shorter files are fingerprinted by all their bytes, and a
# position records how many (head_length).
HEAD_BYTES = 1024
# The bytes before a consumed end whose CRC-32 is kept: a file changed there was not merely appended to.
FINGERPRINT_BYTES = 4096
_BLOCK = 1 << 16
# Compressed bytes read at a time for a gzip file's head: a KiB of JSON lines inflates from a few hundred.
_HEAD_READ = 1 << 13
# What reading a file's head may raise: the file's own errors, a gzip stream that is corrupt or cut short.
UNREADABLE_HEAD: tuple[type[Exception], ...] = (OSError, EOFError, *INFLATE_ERRORS)


@dataclass(frozen=True)
class FileMark:
    """A local file as it is now: its identity, size on disk, first bytes' CRC and whether it is gzip."""

    identity: str  # device:inode
    size: int
    head_crc: int
    head_length: int
    compressed: bool
    mtime: float
    head: bytes = field(default=b"", repr=False, compare=False)  # the first bytes themselves (prefix_crcs)


def file_identity(stat: os.stat_result) -> str:
    return f"{stat.st_dev}:{stat.st_ino}"


def mark_of(path: str) -> FileMark | None:
    """The file's mark, None when it cannot be read now (gone, not a regular file, a truncated gzip head)."""
    try:  # a descriptor, not a file object (a fifth of the mark's cost); O_NONBLOCK: a FIFO must not block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.fstat(fd)
        if not S_ISREG(stat.st_mode):
            return None
        compressed = os.pread(fd, 2, 0) == GZIP_MAGIC
        head = head_bytes(fd, compressed, HEAD_BYTES)
    except UNREADABLE_HEAD:
        return None
    finally:
        os.close(fd)
    return FileMark(file_identity(stat), stat.st_size, zlib.crc32(head), len(head), compressed, stat.st_mtime, head)


def head_bytes(fd: int, compressed: bool, length: int) -> bytes:
    """The first `length` bytes of the file's content (decompressed when gzip: inflated across members only as far
    as `length`; EOFError for a stream that ends inside a member before that). Once inflatable, a gzip file's first
    bytes do not change as it is written on, so a file being written has its head as soon as it holds `length`
    bytes of content; one cut short before them has none yet."""
    if not compressed:
        return os.pread(fd, length, 0)
    out = bytearray()
    inflater, fed, between = head_inflater(), False, False
    offset, data = 0, b""
    while len(out) < length:
        if not data:
            data = os.pread(fd, _HEAD_READ, offset)
            offset += len(data)
            if not data:
                if fed:
                    raise EOFError("the gzip stream ends inside a member")
                break
        if between:  # gzip(1) accepts zero padding after a member
            data = data.lstrip(b"\0")
            if not data:
                continue
            between = False
        out += inflater.decompress(data, length - len(out))
        fed = True
        data = inflater.unconsumed_tail
        if inflater.eof:
            data = inflater.unused_data
            inflater, fed, between = head_inflater(), False, True
    return bytes(out[:length])


def begins_with(head: bytes, crc: int, length: int) -> bool:
    """Whether a file's first bytes (`head`) hold `length` bytes whose CRC-32 is `crc`."""
    return len(head) >= length and zlib.crc32(head[:length]) == crc


def head_matches(path: str, compressed: bool, head_length: int | None, head_crc: int | None) -> bool:
    """Whether the file's first head_length bytes have this CRC (a position recorded before heads were kept has
    none: it matches)."""
    if head_length is None or head_crc is None:
        return True
    try:
        with open(path, "rb") as file:
            head = head_bytes(file.fileno(), compressed, head_length)
    except UNREADABLE_HEAD:
        return False
    return begins_with(head, head_crc, head_length)


def prefix_crcs(head: bytes) -> dict[int, int]:
    """{CRC-32: length} of each prefix of a file's first HEAD_BYTES (`head`, FileMark.head) that ends a line, and
    of all of a short file: where the position of a file consumed short of a KiB may have consumed it to (its head
    ends there)."""
    found: dict[int, int] = {}
    crc, done = 0, 0
    while (end := head.find(b"\n", done) + 1) > 0:
        crc = zlib.crc32(head[done:end], crc)
        found[crc] = done = end
    if 0 < len(head) < HEAD_BYTES:
        found[zlib.crc32(head)] = len(head)  # all of it: a file followed anew from 0 noted its whole head
    return found


def plain_blocks(file: BinaryIO) -> Iterator[bytes]:
    """The decompressed content of a gzip file (every member), block by block, from its start."""
    file.seek(0)
    with gzip.GzipFile(fileobj=file, mode="rb") as plain:
        while block := plain.read(_BLOCK):
            yield block


@dataclass(frozen=True)
class Content:
    """A file's content length (decompressed for gzip) and the CRC-32 of the FINGERPRINT_BYTES before `at`."""

    length: int
    crc_before: int | None  # None: the content is shorter than `at`


def content_at(path: str, compressed: bool, at: int) -> Content | None:
    """The content's length and its fingerprint before offset `at` (of the decompressed stream for gzip: read
    whole once). None when the file cannot be read (gone, or a gzip stream cut short)."""
    try:
        with open(path, "rb") as file:
            if not compressed:
                size = os.fstat(file.fileno()).st_size
                if size < at:
                    return Content(size, None)
                start = max(0, at - FINGERPRINT_BYTES)
                return Content(size, zlib.crc32(os.pread(file.fileno(), at - start, start)))
            window, length = b"", 0
            crc = None
            for block in plain_blocks(file):
                if length < at:
                    window = (window + block[: at - length])[-FINGERPRINT_BYTES:]
                length += len(block)
                if crc is None and length >= at:
                    crc = zlib.crc32(window)
            return Content(length, crc if length >= at else None)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile):
        return None


def last_gzip_member(fd: int, start: int, end: int) -> int:
    """The offset just past the last complete gzip member in [start, end) (Fluentd's `compress gzip` with `append
    true` appends one member per flush); start when none is complete. Bytes that are not gzip end the search."""
    complete, position = start, start
    decoder = gzip_inflater()
    member_start = start
    while position < end:
        chunk = os.pread(fd, min(_BLOCK, end - position), position)
        if not chunk:
            break
        position += len(chunk)
        while chunk:
            try:
                decoder.decompress(chunk)
            except INFLATE_ERRORS:
                return complete
            if not decoder.eof:
                break
            rest = decoder.unused_data
            member_start = position - len(rest)
            complete = member_start
            decoder = gzip_inflater()
            chunk = rest
    return complete

"""Reading one delivery of a local staging file that may be written in place: the byte range from where the
last delivery stopped to the size listed, cut after its last whole record (a newline; a complete MessagePack
item; a complete gzip member), so that a record a writer has half flushed waits for the next delivery
(docs/design.md, "Files written in place and appended to"). The task reports where it stopped: the file's
position."""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass
from typing import BinaryIO

import msgpack

from siltlake.delivery_names import DeliveryName
from siltlake.records import detect_format
from siltlake.records.batches import BadRecord
from siltlake.records.framing import GZIP_MAGIC, SNIFF_BYTES, ByteStream
from siltlake.stream.identity import (
    FINGERPRINT_BYTES,
    HEAD_BYTES,
    UNREADABLE_HEAD,
    begins_with,
    file_identity,
    head_bytes,
    last_gzip_member,
    plain_blocks,
)
from siltlake.tabledef import TableDef

__all__ = [
    "FINGERPRINT_BYTES",
    "Delivery",
    "FileMoved",
    "NotedFileReplaced",
    "file_identity",
    "open_delivery",
]

_BLOCK = 1 << 16


class FileMoved(Exception):
    """The file at a delivery's name is no longer the file the delivery was registered for (renamed away,
    replaced, truncated below the delivery's start): nothing is read; the file is found again by its identity
    under its new name, or followed anew from its start."""


class NotedFileReplaced(FileNotFoundError):
    """A name's first delivery found another file than the one noted when the name was registered: the delivery
    reads nothing and is set aside as unknown, with this reason."""


@dataclass(frozen=True)
class NotedFile:
    """What was noted of a local file when its name was registered: its device:inode and (CRC-32, length) of its
    first bytes. The name's first delivery reads no other file, unless it begins with those bytes (the object put
    again in place)."""

    identity: str
    head: tuple[int, int] | None


@dataclass(frozen=True)
class Delivery:
    """What a task reads of an appendable file, and the position it reports."""

    stream: ByteStream  # the range to read, as a file's read() gives it
    table: TableDef  # the file's format fixed, as its start decided it
    consumed_end: int
    read_end: int
    file_identity: str
    fingerprint: int
    head_crc: int
    head_length: int
    compressed: bool
    fragment_end: int | None  # a trailing fragment taken as its last record ended here
    lead: BadRecord | None  # the rest of a MessagePack item an earlier delivery took as final (`cont`)
    read_start: int  # the first byte of the file the stream reads (after `lead`)
    # A gzip range read to its end as whole members, unchecked: its read inflates it once. Should the read find a
    # member cut short (a file being appended to) or bytes that are not gzip, the task opens it again without.
    assumed_whole: bool = False


def open_delivery(
    file: BinaryIO,
    key: str,
    table: TableDef,
    name: DeliveryName,
    end: int | None,
    fragment_final_after: float,
    assume_whole: bool = False,
    noted: NotedFile | None = None,
) -> Delivery:
    """The delivery [start, end) of an open local file, cut after its last whole record. A trailing fragment is
    taken too when the delivery is `last`, or the file has not changed for fragment_final_after and is still
    `end` bytes long: its writer is done, the last line lacks only its newline. With assume_whole a gzip range
    is taken as whole members without inflating it to find its last (Delivery.assumed_whole). `noted`: what was
    noted of the file when the name was registered; the name's first delivery finds no file (FileNotFoundError)
    when another file has the name now that does not begin as it did (stream/rotation.py follows that one)."""
    fd = file.fileno()
    stat = os.fstat(fd)
    identity = file_identity(stat)
    if name.identity is not None and name.identity != identity:
        raise FileMoved(f"the file at this name is {identity}, not {name.identity}: it was renamed or replaced")
    compressed = os.pread(fd, 2, 0) == GZIP_MAGIC
    try:  # of a gzip, only the head is inflated here: the read inflates it whole, once
        head = head_bytes(fd, compressed, HEAD_BYTES)
    except UNREADABLE_HEAD:  # a gzip cut short: the reader says what is wrong with it
        head = b""
    if noted is not None and noted.identity != identity and not (noted.head is None or begins_with(head, *noted.head)):
        # A rotation shifted another file into the name before its first delivery read it: that file is followed
        # under its own position and the registered one, renamed away, under its new name. (A file with the noted
        # first bytes is the object put again, in place: read as it always was.)
        raise NotedFileReplaced(
            f"the file registered at this name ({noted.identity}) was renamed away or replaced by {identity} before "
            "its first read: its lines load from the name it went to, and a replay would read the file here now"
        )
    if name.head is not None and not begins_with(head, *name.head):
        raise FileMoved(
            f"the file at this name ({identity}) does not begin as the file this delivery was registered "
            "for: another file took its name and its inode"
        )
    start = name.start
    if compressed and name.plain:
        return _plain_copy(file, table, name, identity, head)
    if stat.st_size < start:  # truncated since (copytruncate): the next listing follows it anew from 0
        raise FileMoved(
            f"the file shrank to {stat.st_size:,} bytes, below the offset {start:,} this delivery "
            "starts at: it was truncated"
        )
    end = stat.st_size if end is None else min(end, stat.st_size)
    reading = table
    if compressed:
        cut = end if assume_whole else last_gzip_member(fd, start, end)
    else:
        sniff = os.pread(fd, SNIFF_BYTES, 0)
        reading = table.model_copy(update={"format": detect_format(key, sniff, table.format)})
        cut = _last_msgpack_item(fd, start, end) if reading.format == "msgpack" else _last_newline(fd, start, end)
    fragment_end = None
    done = name.last or time.time() - stat.st_mtime >= fragment_final_after
    if cut < end and stat.st_size == end and done:
        cut = fragment_end = end
    lead = None
    if name.continues and cut > start and not compressed:
        if reading.format == "msgpack":  # an item's start cannot be found going back: its rest is a bad record
            first = _first_newline(fd, start, cut)
            lead = BadRecord(
                1,
                "the rest of an item whose first part was taken as final (its writer paused longer "
                "than stream.fragment_final_after)",
                os.pread(fd, first - start, start).decode("utf-8", "backslashreplace").rstrip("\n"),
            )
            start = first
        else:  # the line is whole now: read it from its start, so it is loaded once as the line it is
            start = _last_newline(fd, 0, start)
    prefix = b""
    if not compressed:
        # A short file's head ends where it was consumed, at a record's end: a copy of it shorter than a KiB is
        # found by the CRCs of its first lines (stream/rotation.py).
        head = head[:cut]
    if reading.format == "csv" and start > 0 and not compressed:  # a tail has no header of its own
        prefix = _first_line(fd)
    return Delivery(
        _Range(fd, start, cut, prefix),
        reading,
        cut,
        end,
        identity,
        _fingerprint(fd, cut),
        zlib.crc32(head),
        len(head),
        compressed,
        fragment_end,
        lead,
        start,
        assumed_whole=compressed and assume_whole,
    )


def _plain_copy(file: BinaryIO, table: TableDef, name: DeliveryName, identity: str, head: bytes) -> Delivery:
    """A compressed copy's content from a decompressed offset to its end: a rotated copy is done growing."""
    content = b"".join(plain_blocks(file))  # bounded by what one rotated file holds past what was loaded
    start = min(name.start, len(content))
    prefix = b""
    reading = table.model_copy(update={"format": detect_format("", content[:SNIFF_BYTES], table.format)})
    if reading.format == "csv" and start > 0:
        prefix = content.split(b"\n", 1)[0] + b"\n"
    # The position counts the file's stored bytes, as for any gzip file: it was read to its end.
    size = os.fstat(file.fileno()).st_size
    return Delivery(
        _Bytes(prefix + content[start:]),
        reading,
        size,
        size,
        identity,
        _fingerprint(file.fileno(), size),
        zlib.crc32(head),
        len(head),
        True,
        None,
        None,
        start,
    )


def _fingerprint(fd: int, end: int) -> int:
    start = max(0, end - FINGERPRINT_BYTES)
    return zlib.crc32(os.pread(fd, end - start, start))


def _last_newline(fd: int, start: int, end: int) -> int:
    """The offset just past the last newline in [start, end); start when there is none."""
    position = end
    while position > start:
        begin = max(start, position - _BLOCK)
        found = os.pread(fd, position - begin, begin).rfind(b"\n")
        if found >= 0:
            return begin + found + 1
        position = begin
    return start


def _first_newline(fd: int, start: int, end: int) -> int:
    """The offset just past the first newline in [start, end); end when there is none."""
    position = start
    while position < end:
        block = os.pread(fd, min(_BLOCK, end - position), position)
        found = block.find(b"\n")
        if found >= 0:
            return position + found + 1
        position += len(block)
    return end


def _last_msgpack_item(fd: int, start: int, end: int) -> int:
    """The offset just past the last complete MessagePack item in [start, end) (items are skipped, not built)."""
    unpacker = msgpack.Unpacker(max_buffer_size=0)
    position, complete = start, start
    while position < end:
        chunk = os.pread(fd, min(_BLOCK, end - position), position)
        if not chunk:
            break
        position += len(chunk)
        unpacker.feed(chunk)
        while True:
            try:
                unpacker.skip()
            except msgpack.OutOfData:
                break
            except (ValueError, msgpack.UnpackException):  # not MessagePack: the decoder reports it
                return end
            complete = start + unpacker.tell()
    return complete


def _first_line(fd: int) -> bytes:
    line, position = b"", 0
    while True:
        block = os.pread(fd, _BLOCK, position)
        if not block:
            return line + b"\n"
        found = block.find(b"\n")
        if found >= 0:
            return line + block[: found + 1]
        line += block
        position += len(block)


class _Bytes:
    """A read-only stream over bytes in memory."""

    def __init__(self, data: bytes) -> None:
        self._data, self._position = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._position + size
        out = self._data[self._position : end]
        self._position += len(out)
        return out


class _Range:
    """A read-only stream of `prefix` then the bytes [start, end) of a file descriptor."""

    def __init__(self, fd: int, start: int, end: int, prefix: bytes) -> None:
        self._fd, self._position, self._end, self._prefix = fd, start, end, prefix

    def read(self, size: int = -1) -> bytes:
        if self._prefix:
            out, self._prefix = self._prefix, b""
            return out
        if size < 0:
            size = self._end - self._position
        size = min(size, self._end - self._position)
        if size <= 0:
            return b""
        data = os.pread(self._fd, size, self._position)
        self._position += len(data)
        return data

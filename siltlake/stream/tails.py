"""Reading one delivery of a local staging file that may be written in place: the byte range from where the
last delivery stopped to the size listed, cut after its last whole record (a newline; a complete MessagePack
item), so that a record a writer has half flushed waits for the next delivery (docs/design.md, "Files written
in place and appended to"). The task reports where it stopped: the file's position."""

from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass
from typing import BinaryIO

import msgpack

from siltlake.records import UnreadableObject, detect_format
from siltlake.records.framing import GZIP_MAGIC, SNIFF_BYTES
from siltlake.tabledef import TableDef

# The bytes before a consumed end whose CRC-32 is kept: a file changed there was not merely appended to.
FINGERPRINT_BYTES = 4096
_BLOCK = 1 << 16
OFFSET_MARK = "#offset="


def split_delivery(uri: str) -> tuple[str, int]:
    """(the file's URI, the offset its delivery starts at). A stored URI never holds '#' of its own (keys are
    percent-encoded), so '#offset=' marks a later delivery of the same file."""
    base, mark, start = uri.partition(OFFSET_MARK)
    return (base, int(start.partition("-")[0])) if mark else (uri, 0)


def delivery_uri(uri: str, start: int, end: int | None = None) -> str:
    """A later delivery's URI: `<uri>#offset=<start>-<end>`. The end (the size it was registered at) keeps it
    unique: a delivery that consumed nothing (half a line) leaves the next one starting at the same offset."""
    return f"{uri}{OFFSET_MARK}{start}" + (f"-{end}" if end is not None else "")


@dataclass(frozen=True)
class Delivery:
    """What a task reads of an appendable file, and the position it reports."""

    stream: BinaryIO
    table: TableDef  # the file's format fixed, as its start decided it
    consumed_end: int
    read_end: int
    file_identity: str
    fingerprint: int


def file_identity(stat: os.stat_result) -> str:
    return f"{stat.st_dev}:{stat.st_ino}"


def fingerprint(file: BinaryIO, end: int) -> int:
    start = max(0, end - FINGERPRINT_BYTES)
    return zlib.crc32(os.pread(file.fileno(), end - start, start))


def open_delivery(file: BinaryIO, key: str, table: TableDef, start: int, end: int | None,
                  settle_time: float) -> Delivery | None:
    """The delivery [start, end) of an open local file, cut after its last whole record; None when the file
    cannot be appended to (gzip: read whole as any object). A trailing fragment is taken too when the file has
    not changed for settle_time and is still `end` bytes long: its writer is done, the last line lacks only
    its newline."""
    fd = file.fileno()
    stat = os.fstat(fd)
    head = os.pread(fd, SNIFF_BYTES, 0)
    if head.startswith(GZIP_MAGIC):
        return None
    if stat.st_size < start:
        raise UnreadableObject(f"the file shrank to {stat.st_size:,} bytes, below the offset {start:,} this "
                               "delivery starts at: it was rewritten, not appended to")
    end = stat.st_size if end is None else min(end, stat.st_size)
    object_format = detect_format(key, head, table.format)
    cut = _last_msgpack_item(fd, start, end) if object_format == "msgpack" else _last_newline(fd, start, end)
    if cut < end and stat.st_size == end and time.time() - stat.st_mtime >= settle_time:
        cut = end
    prefix = b""
    if object_format == "csv" and start > 0:  # a tail has no header of its own: the file's first line is it
        prefix = head.split(b"\n", 1)[0] + b"\n" if b"\n" in head else _first_line(fd)
    return Delivery(_Range(fd, start, cut, prefix), table.model_copy(update={"format": object_format}), cut, end,
                    file_identity(stat), fingerprint(file, cut))


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
            return line + block[:found + 1]
        line += block
        position += len(block)


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

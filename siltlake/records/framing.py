"""The bytes of a staging object, plain or gzip (found by magic bytes), streamed in bounded chunks; and its
format, by configuration, the key's extension or the first bytes."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from siltlake.records.batches import UnreadableObject

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
READ_SIZE = 1 << 20
# Caps the output of one inflate call so that a highly compressed object cannot balloon.
MAX_INFLATE_CHUNK = 4 << 20
SNIFF_BYTES = 4096
MAX_LINE_BYTES = 64 << 20
# Below this many decompressed bytes an object may compress as well as it likes (a small file of repeated
# lines is no threat); past it, stream.max_compression_ratio applies.
RATIO_FLOOR = 64 << 20

JSONL_EXTENSIONS = ("json", "jsonl", "ndjson", "log")
MSGPACK_EXTENSIONS = ("msgpack", "mpk", "mp")
CSV_EXTENSIONS = ("csv",)
FORMATS = ("jsonl", "msgpack", "csv")


def detect_format(key: str, head: bytes, configured: str) -> str:
    """'jsonl' | 'msgpack' | 'csv'. configured is TableDef.format; 'auto' means: by the key's extension after stripping .gz/.gzip (.json/.jsonl/.ndjson/.log -> jsonl, .msgpack/.mpk/.mp -> msgpack, .csv -> csv), else sniff the first decompressed bytes."""  # noqa: E501
    if configured in FORMATS:
        return configured
    if configured != "auto":
        raise ValueError(f"format {configured!r} is not one of auto, {', '.join(FORMATS)}")
    name = key.rsplit("/", 1)[-1].lower()
    for suffix in (".gz", ".gzip"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    extension = name.rsplit(".", 1)[-1] if "." in name else ""
    if extension in JSONL_EXTENSIONS:
        return "jsonl"
    if extension in MSGPACK_EXTENSIONS:
        return "msgpack"
    if extension in CSV_EXTENSIONS:
        return "csv"
    return _sniff_format(head)


def _sniff_format(head: bytes) -> str:
    text = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    text = text.lstrip(b" \t\r\n")
    if not text:
        return "jsonl"
    first = text[0]
    if first in b"{[":
        return "jsonl"
    # fixmap, fixarray, array16/32, map16/32: what a stream of records or Fluentd entries starts with.
    if 0x80 <= first <= 0x9F or 0xDC <= first <= 0xDF:
        return "msgpack"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not merely a character cut by the sniff window
            return "msgpack"
    if b"," in text.split(b"\n", 1)[0]:
        return "csv"
    return "jsonl"



@dataclass(frozen=True)
class ObjectLimits:
    """What one object may decompress to (stream.max_object_bytes, stream.max_compression_ratio); None: no
    bound. A few MB of gzip can inflate to gigabytes, each byte of which costs decoding time."""

    max_bytes: int | None = None
    max_ratio: float | None = None
    ratio_floor: int = RATIO_FLOOR


class ObjectBytes:
    """The object's content as decompressed chunks, with its first bytes available for sniffing; past its
    limits, UnreadableObject."""

    def __init__(self, stream: BinaryIO, limits: ObjectLimits | None = None) -> None:
        self._stream = stream
        self._limits = limits or ObjectLimits()
        self._out = 0  # decompressed bytes so far
        self._in = 0  # compressed bytes those came from (0 for a plain object)
        first = b""
        while len(first) < len(GZIP_MAGIC):
            more = stream.read(READ_SIZE)
            if not more:
                break
            first += bytes(more)
        rest = self._gunzip(first) if first.startswith(GZIP_MAGIC) else self._plain(first)
        self._rest = self._limited(rest)
        self._peeked: list[bytes] = []

    def head(self, size: int) -> bytes:
        have = sum(len(chunk) for chunk in self._peeked)
        while have < size:
            chunk = next(self._rest, None)
            if chunk is None:
                break
            self._peeked.append(chunk)
            have += len(chunk)
        return b"".join(self._peeked)[:size]

    def chunks(self) -> Iterator[bytes]:
        while self._peeked:
            yield self._peeked.pop(0)
        yield from self._rest

    def _limited(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        limits = self._limits
        for chunk in chunks:
            self._out += len(chunk)
            if limits.max_bytes is not None and self._out > limits.max_bytes:
                raise UnreadableObject(f"the object decompresses to more than {limits.max_bytes:,} bytes "
                                       "(stream.max_object_bytes)")
            if (limits.max_ratio is not None and self._in and self._out > limits.ratio_floor
                    and self._out > limits.max_ratio * self._in):
                raise UnreadableObject(f"the object decompresses to more than {limits.max_ratio:g} times its "
                                       f"compressed size ({self._out:,} bytes from the first {self._in:,}; "
                                       "stream.max_compression_ratio)")
            yield chunk

    def _read(self) -> bytes:
        return bytes(self._stream.read(READ_SIZE))

    def _plain(self, first: bytes) -> Iterator[bytes]:
        if first:
            yield first
        while chunk := self._read():
            yield chunk

    def _gunzip(self, first: bytes) -> Iterator[bytes]:
        data = first
        compressed = len(first)
        inflater = zlib.decompressobj(wbits=31)
        in_member = True
        while True:
            if in_member:
                try:
                    out = inflater.decompress(data, MAX_INFLATE_CHUNK)
                except zlib.error as exc:
                    raise UnreadableObject(
                        f"corrupt gzip stream within the first {compressed} compressed bytes: {exc}"
                    ) from None
                data = inflater.unused_data if inflater.eof else inflater.unconsumed_tail
                self._in = compressed - len(data)  # what this output came from, not what was read ahead
                if out:
                    yield out
                if inflater.eof:
                    in_member = False
                    continue
                if data or len(out) == MAX_INFLATE_CHUNK:
                    continue
            else:
                # gzip(1) accepts zero padding after a member; anything else must be another member.
                data = data.lstrip(b"\0")
                if data:
                    inflater = zlib.decompressobj(wbits=31)
                    in_member = True
                    continue
            chunk = self._read()
            if not chunk:
                if in_member:
                    raise UnreadableObject(f"truncated gzip stream after {compressed} compressed bytes")
                return
            compressed += len(chunk)
            data = chunk


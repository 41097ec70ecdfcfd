"""The bytes of a staging object, plain or gzip (found by magic bytes; inflated by records.inflate, ISA-L's inflate
or zlib's), streamed in bounded chunks; and its format, by configuration, the first bytes or the key's extension."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from siltlake.records import inflate
from siltlake.records.batches import UnreadableObject
from siltlake.timevalues import parse_event_time

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
LTSV_EXTENSIONS = ("ltsv",)
FORMATS = ("jsonl", "msgpack", "csv", "fluentd_line", "ltsv")

# Compressions siltlake does not decode, by their magic bytes: named, so that such an object is unknown for
# what it is rather than as MessagePack that does not decode.
_OTHER_COMPRESSIONS = (
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x04\x22\x4d\x18", "LZ4"),
    (b"\x89LZO\x00\r\n\x1a\n", "LZO (lzop)"),
    (b"\xff\x06\x00\x00sNaPpY", "Snappy"),
    (b"PK\x03\x04", "zip"),
)
_BZIP2 = re.compile(rb"BZh[1-9]1AY&SY")
# LTSV (http://ltsv.org): a label is 1 or more of these; the value runs to the next TAB.
LTSV_LABEL = re.compile(r"[0-9A-Za-z_.\-]+")
_LTSV_FIELD = re.compile(rb"[0-9A-Za-z_.\-]+:")
# Fluentd out_file's line: time TAB tag TAB {json} (or time TAB {json} when output_tag is off).
_FLUENTD_LINE = re.compile(rb"(?P<time>[^\t{]+)\t(?:[^\t{]+\t)?\{")


def detect_format(key: str, head: bytes, configured: str) -> str:
    """One of FORMATS. configured is TableDef.format; 'auto' means: what the first decompressed bytes show when
    they show it (docs/coercion.md, "Format"), else by the key's extension after stripping .gz/.gzip
    (.json/.jsonl/.ndjson/.log -> jsonl, .msgpack/.mpk/.mp -> msgpack, .csv -> csv, .ltsv -> ltsv), else a
    last guess from the bytes. Content wins over the name: Fluentd writes MessagePack under .log."""
    _refuse_other_compressions(head)
    if configured in FORMATS:
        return configured
    if configured != "auto":
        raise ValueError(f"format {configured!r} is not one of auto, {', '.join(FORMATS)}")
    return sniff_content(head) or _format_by_name(key) or _guess_format(head)


def _refuse_other_compressions(head: bytes) -> None:
    for magic, name in _OTHER_COMPRESSIONS:
        if head.startswith(magic):
            raise UnreadableObject(
                f"the object is {name}-compressed; siltlake reads plain and gzip objects only: "
                "have the shipper compress with gzip (or not at all)"
            )
    if _BZIP2.match(head):
        raise UnreadableObject(
            "the object is bzip2-compressed; siltlake reads plain and gzip objects only: have "
            "the shipper compress with gzip (or not at all)"
        )


def _format_by_name(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1].lower()
    for suffix in (".gz", ".gzip"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    extension = name.rsplit(".", 1)[-1] if "." in name else ""
    for extensions, found in (
        (JSONL_EXTENSIONS, "jsonl"),
        (MSGPACK_EXTENSIONS, "msgpack"),
        (CSV_EXTENSIONS, "csv"),
        (LTSV_EXTENSIONS, "ltsv"),
    ):
        if extension in extensions:
            return found
    return None


def sniff_content(head: bytes) -> str | None:
    """The format the first bytes show beyond doubt, else None. Looks at the first byte, and at the first
    line for the text formats: a JSON object ('{' or '['), MessagePack (a map or an array: 0x80-0x9f, or
    0xdc-0xdf followed by a length byte, which no UTF-8 text starts with), a Fluentd out_file line (a time,
    TAB, [a tag, TAB,] '{'), LTSV (at least two TAB-separated label:value fields)."""
    text = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    text = text.lstrip(b" \t\r\n")
    if not text:
        return None
    first = text[0]
    if first in b"{[":
        return "jsonl"
    if 0x80 <= first <= 0x9F or (0xDC <= first <= 0xDF and (len(text) == 1 or text[1] < 0x80)):
        return "msgpack"
    line, newline, _ = text.partition(b"\n")
    line = line.rstrip(b"\r")
    match = _FLUENTD_LINE.match(line)
    if match and _is_time(match["time"]):
        return "fluentd_line"
    fields = [field for field in line.split(b"\t") if field]
    if not newline and len(head) >= SNIFF_BYTES and fields:
        fields.pop()  # the sniff window cut the line: its last field may be cut before its colon
    if len(fields) >= 2 and all(_LTSV_FIELD.match(field) for field in fields):
        return "ltsv"
    return None


def _is_time(text: bytes) -> bool:
    try:
        parse_event_time(text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _guess_format(head: bytes) -> str:
    """No name and no sure sign: binary is MessagePack, a first line with a comma CSV, the rest JSON lines."""
    text = head[len(UTF8_BOM) :] if head.startswith(UTF8_BOM) else head
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:  # not merely a character cut by the sniff window
            return "msgpack"
    if b"," in text.lstrip(b" \t\r\n").split(b"\n", 1)[0]:
        return "csv"
    return "jsonl"


@dataclass(frozen=True)
class ObjectLimits:
    """What one object may decompress to (stream.max_object_bytes, stream.max_compression_ratio); None: no
    bound. A few MB of gzip can inflate to gigabytes, each byte of which costs decoding time."""

    max_bytes: int | None = None
    max_ratio: float | None = None
    ratio_floor: int = RATIO_FLOOR


class ByteStream(Protocol):
    """What an object is read through: a binary file, or a delivery's range of one (stream/tails.py)."""

    def read(self, size: int = -1, /) -> bytes: ...


class ObjectBytes:
    """The object's content as decompressed chunks, with its first bytes available for sniffing; past its
    limits, UnreadableObject."""

    def __init__(self, stream: ByteStream, limits: ObjectLimits | None = None) -> None:
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
                raise UnreadableObject(
                    f"the object decompresses to more than {limits.max_bytes:,} bytes (stream.max_object_bytes)"
                )
            if (
                limits.max_ratio is not None
                and self._in
                and self._out > limits.ratio_floor
                and self._out > limits.max_ratio * self._in
            ):
                raise UnreadableObject(
                    f"the object decompresses to more than {limits.max_ratio:g} times its "
                    f"compressed size ({self._out:,} bytes from the first {self._in:,}; "
                    "stream.max_compression_ratio)"
                )
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
        inflater = inflate.gzip_inflater()
        in_member = True
        while True:
            if in_member:
                try:
                    out = inflater.decompress(data, MAX_INFLATE_CHUNK)
                except inflate.INFLATE_ERRORS as exc:
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
                    inflater = inflate.gzip_inflater()
                    in_member = True
                    continue
            chunk = self._read()
            if not chunk:
                if in_member:
                    raise UnreadableObject(f"truncated gzip stream after {compressed} compressed bytes")
                return
            compressed += len(chunk)
            data = chunk

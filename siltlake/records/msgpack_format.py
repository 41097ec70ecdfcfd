"""MessagePack into typed batches: a stream of maps, or of Fluentd forward-protocol messages."""

from __future__ import annotations

import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from siltlake import timevalues as tv
from siltlake.records.batches import BadRecord, BatchAssembler, ParsedBatch, UnreadableObject
from siltlake.records.coerce import RecordConverter, describe, render_json, unexpected_reason
from siltlake.tabledef import TableDef

MAX_MSGPACK_ITEM = 128 << 20


def new_unpacker() -> msgpack.Unpacker:
    # timestamp=0 keeps ext -1 as msgpack.Timestamp (the C unpacker decodes it before ext_hook);
    # surrogateescape turns invalid UTF-8 in a str into a bad value instead of a failed stream.
    return msgpack.Unpacker(
        raw=False,
        timestamp=0,
        strict_map_key=False,
        unicode_errors="surrogateescape",
        ext_hook=tv.msgpack_ext_hook,
        max_buffer_size=MAX_MSGPACK_ITEM,
    )


_MSGPACK_ERRORS = (ValueError, TypeError, msgpack.UnpackException, msgpack.ExtraData, msgpack.FormatError)
MAX_MSGPACK_DEPTH = 1024  # msgpack's unpacker: arrays and maps nested deeper raise StackError
_KINDS = {"list": "an array", "dict": "a map"}
_TOO_LONG = re.compile(r"^(\d+) exceeds max_(array|map|str|bin|ext)_len\((\d+)\)$")


def undecodable(exc: BaseException) -> str:
    """What an unpacker's exception means for the bytes, in MessagePack's terms, not Python's."""
    if isinstance(exc, TypeError) and (unhashable := re.match(r"unhashable type: '(\w+)'", str(exc))):
        kind = _KINDS.get(unhashable[1], f"a {unhashable[1]}")
        return f"a map has {kind} as a key; record keys must be strings (field names)"
    if isinstance(exc, msgpack.StackError):
        return f"arrays and maps nested more than {MAX_MSGPACK_DEPTH} levels deep"
    if isinstance(exc, msgpack.FormatError):
        return "a byte that starts no MessagePack value (0xc1, which MessagePack reserves)"
    if too_long := _TOO_LONG.match(str(exc)):
        return (
            f"{'a' if too_long[2] != 'array' else 'an'} {too_long[2]} of {int(too_long[1]):,} "
            f"{'entries' if too_long[2] == 'map' else 'elements' if too_long[2] == 'array' else 'bytes'}, "
            f"more than the {int(too_long[3]):,} a MessagePack item may hold here"
        )
    if isinstance(exc, zlib.error):
        return f"not valid gzip ({str(exc).rsplit(': ', 1)[-1]})"
    return str(exc) or type(exc).__name__


_TIME_LIKE = (int, float, tv.EventTime, msgpack.Timestamp, msgpack.ExtType, tv.RawExt)


def _is_time_like(value: object) -> bool:
    return isinstance(value, _TIME_LIKE) and not isinstance(value, bool)


@dataclass
class Entry:
    record: dict[Any, Any] | None
    entry_time: object
    raw: object
    problem: str | None = None


def _packed_entries(data: bytes, option: object) -> list[object]:
    """The [time, record] entries of a PackedForward message (gzip members when compressed)."""
    if isinstance(option, dict) and option.get("compressed") == "gzip":
        members = []
        while data:
            inflater = zlib.decompressobj(wbits=31)
            members.append(inflater.decompress(data, MAX_MSGPACK_ITEM))
            if inflater.unconsumed_tail or not inflater.eof:
                raise ValueError("compressed entries are truncated or too large")
            data = inflater.unused_data
        data = b"".join(members)
    unpacker = new_unpacker()
    unpacker.feed(data)
    entries = list(unpacker)
    if unpacker.tell() != len(data):
        raise ValueError("entries end in the middle of an item")
    return entries


def msgpack_entries(item: object) -> Iterator[Entry]:
    """The records of one stream item: a map, or one of Fluentd's forward protocol shapes."""
    if isinstance(item, dict):
        yield Entry(item, None, item)
        return
    if isinstance(item, list) and 2 <= len(item) <= 4:
        head = item[0]
        option = item[2] if len(item) == 3 else None
        if isinstance(head, str) and len(item) <= 3 and isinstance(item[1], (list, bytes)):
            # Forward / PackedForward mode: [tag, entries(, option)]
            entries = item[1]
            if isinstance(entries, bytes):
                try:
                    entries = _packed_entries(entries, option)
                except (*_MSGPACK_ERRORS, zlib.error) as exc:
                    yield Entry(None, None, item, f"Fluentd packed entries do not decode: {undecodable(exc)}")
                    return
            for entry in entries:
                # The entry time is checked with the record, which may carry a usable time itself.
                if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict):
                    yield Entry(entry[1], entry[0], entry)
                else:
                    yield Entry(None, None, entry, "Fluentd forward entry is not [time, record]")
            return
        if isinstance(head, str) and len(item) >= 3 and isinstance(item[2], dict):
            yield Entry(item[2], item[1], item)  # Message mode: [tag, time, record(, option)]
            return
        if len(item) == 2 and _is_time_like(head) and isinstance(item[1], dict):
            yield Entry(item[1], head, item)  # [time, record]
            return
    yield Entry(
        None,
        None,
        item,
        f"MessagePack item of the wrong shape ({describe(item)}): expected a map, [time, record], "
        "[tag, time, record] or [tag, [[time, record], ...]]",
    )


def msgpack_items(chunks: Iterable[bytes]) -> Iterator[Any]:
    """The top-level MessagePack items of a byte stream; UnreadableObject names the byte where it breaks.

    Past a malformed or cut-off item nothing can be trusted, so the whole stream is refused."""
    unpacker = new_unpacker()
    fed = complete = items = 0
    for chunk in chunks:
        try:
            unpacker.feed(chunk)
        except msgpack.BufferFull:
            raise UnreadableObject(
                f"MessagePack item at byte {complete} is larger than {MAX_MSGPACK_ITEM >> 20} MiB"
            ) from None
        fed += len(chunk)
        while True:
            try:
                item = unpacker.unpack()
            except msgpack.OutOfData:
                break
            except _MSGPACK_ERRORS as exc:
                raise UnreadableObject(
                    f"not valid MessagePack at byte {complete} (item {items + 1}): {undecodable(exc)}"
                ) from None
            complete = unpacker.tell()
            items += 1
            yield item
    if complete < fed:
        raise UnreadableObject(f"truncated MessagePack stream: the item at byte {complete} is incomplete")


def read_msgpack(
    chunks: Iterable[bytes], table: TableDef, batch_rows: int, dropped: Counter[str] | None = None
) -> Iterator[ParsedBatch]:
    converter = RecordConverter(table, "msgpack", dropped)
    assembler = BatchAssembler(converter.schema, batch_rows)
    index = 0
    items = 0
    structured = 0
    records = 0
    bad: list[BadRecord] = []
    for item in msgpack_items(chunks):
        items += 1
        structured += isinstance(item, (dict, list, tuple))
        try:
            entries = list(msgpack_entries(item))
        except Exception as exc:  # one item never fails its object
            entries = [Entry(None, None, item, f"MessagePack item does not decode: {unexpected_reason(exc)}")]
        for entry in entries:
            index += 1
            reason = entry.problem
            if entry.record is not None:
                records += 1
                reason = converter.add(entry.record, entry.entry_time)
            if reason is not None:
                bad.append(BadRecord(index, reason, render_json(entry.raw)))
            if converter.row_count + len(bad) >= batch_rows:
                yield from assembler.add(converter.take_table(), bad)
                bad = []
    if items and not structured:
        raise UnreadableObject(f"not MessagePack records: none of {items} items is a map or an array")
    if items and not records:  # what was taken for MessagePack by its first bytes may be something else
        raise UnreadableObject(
            f"not MessagePack records: none of {items} items is a map or a Fluentd entry "
            "([time, record], [tag, time, record] or [tag, entries])"
        )
    yield from assembler.add(converter.take_table(), bad)
    yield from assembler.finish()

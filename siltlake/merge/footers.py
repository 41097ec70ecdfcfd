"""Whether local Parquet files share one schema, told from their footers' bytes without decoding them.

A Parquet footer is a thrift FileMetaData in the compact protocol whose first two fields are the format version
and the schema (every column's name, physical and logical type, repetition and field id); row counts and
statistics follow. Files whose footers begin with the same bytes up to the end of the schema have the same
schema, since the protocol is read front to back. Comparing those bytes costs about 10 us a file; decoding a
footer into an Arrow schema costs about 85 us, which was a sixth of a 2,000-object merge's scan.
"""

from __future__ import annotations

import os

_MAGIC = b"PAR1"
_TAIL_READ = 64 * 1024
_VERSION, _SCHEMA, _NUM_ROWS = 1, 2, 3
_BOOL_TRUE, _BOOL_FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


def raw_footer(path: str) -> bytes | None:
    """The thrift bytes of a local Parquet file's footer; None for a file that is not plain Parquet (an
    encrypted footer, no magic, a length past the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < 12:
            return None
        tail = os.pread(fd, min(size, _TAIL_READ), max(0, size - _TAIL_READ))
        if tail[-4:] != _MAGIC:
            return None
        length = int.from_bytes(tail[-8:-4], "little")
        if length > size - 12:
            return None
        if length + 8 <= len(tail):
            return tail[-8 - length : -8]
        return os.pread(fd, length, size - 8 - length)
    finally:
        os.close(fd)


def schema_prefix(footer: bytes) -> bytes | None:
    """The footer's bytes up to the end of its schema (its first two fields); None when the footer is laid out
    some other way (fields out of order, no schema) or cannot be read, so that nothing is judged alike by it."""
    try:
        position, field, schema_seen = 0, 0, False
        while True:
            header = footer[position]
            delta, kind = header >> 4, header & 0x0F
            if header == 0 or delta == 0:  # the struct's end, or a long-form field id: not fields 1 and 2 in order
                return None
            field += delta
            if field > _SCHEMA:
                return footer[:position] if schema_seen else None
            if (field, kind) not in ((_VERSION, _I32), (_SCHEMA, _LIST)):
                return None
            position = _skip(footer, position + 1, kind)
            schema_seen = schema_seen or field == _SCHEMA
    except (IndexError, ValueError):
        return None


def _varint_end(data: bytes, position: int) -> int:
    while data[position] & 0x80:
        position += 1
    return position + 1


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            return value, position
        shift += 7


def _skip(data: bytes, position: int, kind: int, element: bool = False) -> int:
    """The position after one compact-protocol value of `kind` (a list element's booleans take a byte; a
    field's are in its header)."""
    if kind in (_BOOL_TRUE, _BOOL_FALSE):
        return position + 1 if element else position
    if kind == _BYTE:
        return position + 1
    if kind in (_I16, _I32, _I64):
        return _varint_end(data, position)
    if kind == _DOUBLE:
        return position + 8
    if kind == _BINARY:
        length, position = _varint(data, position)
        return position + length
    if kind in (_LIST, _SET):
        header = data[position]
        count, element_kind = header >> 4, header & 0x0F
        position += 1
        if count == 15:
            count, position = _varint(data, position)
        for _ in range(count):
            position = _skip(data, position, element_kind, element=True)
        return position
    if kind == _MAP:
        count, position = _varint(data, position)
        if count:
            kinds = data[position]
            position += 1
            for _ in range(count):
                position = _skip(data, position, kinds >> 4, element=True)
                position = _skip(data, position, kinds & 0x0F, element=True)
        return position
    if kind == _STRUCT:
        while True:
            header = data[position]
            position += 1
            if header == 0:
                return position
            if header >> 4 == 0:  # a long-form field id (zigzag varint) follows the type
                position = _varint_end(data, position)
            position = _skip(data, position, header & 0x0F)
    raise ValueError(f"unknown thrift compact type {kind}")

"""Shallow Parquet merge: copy the row groups of several files byte for byte under one new footer.

No page is decoded. Each source's footer is decoded (thrift compact protocol, via fastparquet's decoder),
its row groups are appended to the first source's footer with their column-chunk offsets shifted to where
the bytes land in the new file, and the result is encoded by the small compact-protocol writer below.

Dropped on the way (they hold absolute offsets inside their own structures, and are only read-path accelerators):
page indexes (column index / offset index), bloom filters, and the per-chunk size/geospatial statistics (their
list element types are not kept by the decoder). Row-group statistics (min/max/null count) are kept.

fastparquet's own encoder (``ThriftObject.to_bytes``) is not used: it writes into a fixed-size buffer without
bounds checks (large statistics overflow it) and silently skips thrift field ids above 13.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO, cast

import pyarrow as pa
import pyarrow.parquet as pq

from siltlake.errors import Refusal

__all__ = ["ConcatResult", "RowGroupAppender", "ShallowMergeRefused", "concatenate", "shallow_merge_refusal"]

MAGIC = b"PAR1"
MAGIC_ENCRYPTED = b"PARE"
COPY_CHUNK = 8 * 1024 * 1024

# Thrift field ids (parquet.thrift).
FMD_SCHEMA, FMD_NUM_ROWS, FMD_ROW_GROUPS, FMD_KV, FMD_ENCRYPTION = 2, 3, 4, 5, 8
RG_COLUMNS, RG_FILE_OFFSET, RG_ORDINAL = 1, 5, 7
CC_FILE_PATH, CC_FILE_OFFSET, CC_META = 1, 2, 3
CC_OFFSET_INDEX_OFFSET, CC_OFFSET_INDEX_LENGTH, CC_COLUMN_INDEX_OFFSET, CC_COLUMN_INDEX_LENGTH = 4, 5, 6, 7
CC_CRYPTO, CC_ENCRYPTED_META = 8, 9
CMD_TOTAL_COMPRESSED, CMD_DATA_PAGE_OFFSET, CMD_INDEX_PAGE_OFFSET, CMD_DICT_PAGE_OFFSET = 7, 9, 10, 11
CMD_BLOOM_OFFSET, CMD_BLOOM_LENGTH, CMD_SIZE_STATS, CMD_GEO_STATS = 14, 15, 16, 17


class ShallowMergeRefused(Refusal):
    """The inputs cannot be concatenated without decoding; .reason says why (schema differs, codec differs,
    column order differs, not Parquet, ...)."""


@dataclass(frozen=True)
class ConcatResult:
    rows: int
    row_groups: int
    bytes_written: int


# --------------------------------------------------------------------------------------------- refusal


def _codecs(md: pq.FileMetaData) -> list[str | None]:
    """Codec per column if every row group agrees, else raise ValueError naming the column."""
    out: list[str | None] = [None] * md.num_columns
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        for j in range(md.num_columns):
            codec = rg.column(j).compression
            if out[j] is None:
                out[j] = codec
            elif out[j] != codec:
                raise ValueError(
                    f"column {md.schema.column(j).path!r} mixes codecs {out[j]} and {codec} inside one file"
                )
    return out


def shallow_merge_refusal(footers: list[pq.FileMetaData]) -> str | None:
    """Why these files cannot be shallow-concatenated, or None if they can: same Arrow/Parquet schema (names,
    types, order, nullability), same compression codec for every column chunk, no encryption."""
    if not footers:
        return "no input files"
    first = footers[0]
    try:
        first_arrow = first.schema.to_arrow_schema()
        first_codecs = _codecs(first)
    except Exception as exc:  # unreadable schema or encrypted column metadata
        return f"file 0: cannot read footer ({type(exc).__name__}: {exc})"
    for n, md in enumerate(footers[1:], start=1):
        try:
            arrow = md.schema.to_arrow_schema()
        except Exception as exc:
            return f"file {n}: cannot read footer ({type(exc).__name__}: {exc})"
        if arrow.names != first_arrow.names:
            if sorted(arrow.names) == sorted(first_arrow.names):
                return f"file {n}: column order differs ({arrow.names} vs {first_arrow.names})"
            return f"file {n}: column names differ ({arrow.names} vs {first_arrow.names})"
        for a, b in zip(first_arrow, arrow, strict=True):
            if a.type != b.type:
                return f"file {n}: column {a.name!r} type differs ({b.type} vs {a.type})"
            if a.nullable != b.nullable:
                return f"file {n}: column {a.name!r} nullability differs ({b.nullable} vs {a.nullable})"
        if not md.schema.equals(first.schema):
            return f"file {n}: Parquet schema differs (physical/logical types or repetition)"
        try:
            codecs = _codecs(md)
        except Exception as exc:
            return f"file {n}: {exc}"
        for j, (a, b) in enumerate(zip(first_codecs, codecs, strict=True)):
            if a is not None and b is not None and a != b:
                return f"file {n}: column {first.schema.column(j).path!r} codec differs ({b} vs {a})"
    return None


# --------------------------------------------------------------------------------------------- thrift writer


def _varint(n: int, out: bytearray) -> None:
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _ctype(value: object, is_i32: bool) -> int:
    if isinstance(value, bool):
        return 1 if value else 2
    if isinstance(value, int):
        return 5 if is_i32 else 6
    if isinstance(value, float):
        return 7
    if isinstance(value, bytes | str):
        return 8
    if isinstance(value, list):
        return 9
    if isinstance(value, dict):
        return 12
    raise TypeError(f"cannot encode {type(value).__name__} in a Parquet footer")


def _write_value(value: object, ctype: int, out: bytearray) -> None:
    if ctype in (1, 2):
        return  # a bool field's value lives in its header
    if ctype in (5, 6):
        _varint(_zigzag(value), out)  # type: ignore[arg-type]
    elif ctype == 7:
        out += struct.pack("<d", value)
    elif ctype == 8:
        data = value.encode() if isinstance(value, str) else cast(bytes, value)  # a binary field: text or bytes
        _varint(len(data), out)
        out += data
    elif ctype == 9:
        _write_list(value, out)  # type: ignore[arg-type]
    else:
        _write_struct(value, out)  # type: ignore[arg-type]


def _write_list(items: list, out: bytearray) -> None:
    # Every integer list left in a footer we write (Encoding lists) holds i32 values.
    etype = _ctype(items[0], True) if items else 12
    if etype in (1, 2):
        etype = 1
    if len(items) < 15:
        out.append((len(items) << 4) | etype)
    else:
        out.append(0xF0 | etype)
        _varint(len(items), out)
    for item in items:
        if etype == 1:
            out.append(1 if item else 2)
        else:
            _write_value(item, etype, out)


def _write_struct(d: dict, out: bytearray) -> None:
    """Encode a struct as decoded by fastparquet's read_thrift ({field id: value}, plus its i32 markers)."""
    all_i32 = "i32" in d
    i32s = d.get("i32list") or ()
    prev = 0
    for fid in sorted(k for k in d if isinstance(k, int)):
        value = d[fid]
        if value is None:
            continue
        ctype = _ctype(value, all_i32 or fid in i32s)
        delta = fid - prev
        if 0 < delta <= 15:
            out.append((delta << 4) | ctype)
        else:
            out.append(ctype)
            _varint(_zigzag(fid), out)
        prev = fid
        _write_value(value, ctype, out)
    out.append(0)


def encode_footer(fmd: dict) -> bytes:
    out = bytearray()
    _write_struct(fmd, out)
    return bytes(out)


# --------------------------------------------------------------------------------------------- reading


@dataclass
class _Source:
    f: object
    footer: dict  # decoded FileMetaData
    arrow_md: pq.FileMetaData


def _size(f) -> int:
    if hasattr(f, "size"):
        return f.size()
    pos = f.tell()
    end = f.seek(0, 2)
    f.seek(pos)
    return end


def _read_at(f, offset: int, n: int) -> bytes:
    f.seek(offset)
    data = f.read(n)
    data = data.to_pybytes() if isinstance(data, pa.Buffer) else bytes(data)
    if len(data) != n:
        raise ShallowMergeRefused(f"short read: wanted {n} bytes at {offset}, got {len(data)}")
    return data


def _open(f, n: int) -> _Source:
    size = _size(f)
    if size < 12:
        raise ShallowMergeRefused(f"file {n}: not Parquet ({size} bytes)")
    head = _read_at(f, 0, 4)
    tail = _read_at(f, size - 8, 8)
    if tail[4:] == MAGIC_ENCRYPTED:
        raise ShallowMergeRefused(f"file {n}: encrypted footer")
    if head != MAGIC or tail[4:] != MAGIC:
        raise ShallowMergeRefused(f"file {n}: not Parquet (no PAR1 magic)")
    footer_len = struct.unpack("<I", tail[:4])[0]
    if footer_len > size - 12:
        raise ShallowMergeRefused(f"file {n}: not Parquet (footer length {footer_len} exceeds file size {size})")
    raw = _read_at(f, size - 8 - footer_len, footer_len)
    # Here, not at the top: fastparquet's package imports pandas (0.2 s), which a stream or a deep merge never needs.
    from fastparquet import cencoding

    try:
        arrow_md = pq.read_metadata(pa.BufferReader(MAGIC + raw + tail))
        footer = cencoding.from_buffer(raw)
    except Exception as exc:
        raise ShallowMergeRefused(f"file {n}: unreadable Parquet footer ({type(exc).__name__}: {exc})") from exc
    if footer.get(FMD_ENCRYPTION) is not None:
        raise ShallowMergeRefused(f"file {n}: encrypted columns")
    return _Source(f, footer, arrow_md)


def _chunk_span(cc: dict) -> tuple[int, int]:
    md = cc[CC_META]
    start = md[CMD_DATA_PAGE_OFFSET]
    dict_off = md.get(CMD_DICT_PAGE_OFFSET)
    if dict_off is not None and 0 < dict_off < start:
        start = dict_off
    return start, start + md[CMD_TOTAL_COMPRESSED]


def _row_group_span(rg: dict, n: int, size: int) -> tuple[int, int]:
    spans = []
    for cc in rg[RG_COLUMNS]:
        if cc.get(CC_FILE_PATH) is not None:
            raise ShallowMergeRefused(f"file {n}: column chunk lives in another file ({cc[CC_FILE_PATH]!r})")
        if cc.get(CC_CRYPTO) is not None or cc.get(CC_ENCRYPTED_META) is not None or cc.get(CC_META) is None:
            raise ShallowMergeRefused(f"file {n}: encrypted column chunk")
        spans.append(_chunk_span(cc))
    start = min(s for s, _ in spans)
    end = max(e for _, e in spans)
    if start < 4 or end > size - 8:
        raise ShallowMergeRefused(f"file {n}: row group bytes [{start}, {end}) lie outside the data area")
    return start, end


def _relocate(rg: dict, delta: int) -> None:
    """Shift a row group's offsets by delta; drop page index, bloom filter and size statistics references."""
    for cc in rg[RG_COLUMNS]:
        md = cc[CC_META]
        for fid in (CMD_DATA_PAGE_OFFSET, CMD_INDEX_PAGE_OFFSET, CMD_DICT_PAGE_OFFSET):
            if md.get(fid) is not None and not (fid == CMD_DICT_PAGE_OFFSET and md[fid] == 0):
                md[fid] += delta
        for fid in (CMD_BLOOM_OFFSET, CMD_BLOOM_LENGTH, CMD_SIZE_STATS, CMD_GEO_STATS):
            md.pop(fid, None)
        if cc.get(CC_FILE_OFFSET):
            cc[CC_FILE_OFFSET] += delta
        for fid in (CC_OFFSET_INDEX_OFFSET, CC_OFFSET_INDEX_LENGTH, CC_COLUMN_INDEX_OFFSET, CC_COLUMN_INDEX_LENGTH):
            cc.pop(fid, None)
    if rg.get(RG_FILE_OFFSET) is not None:
        rg[RG_FILE_OFFSET] += delta
    rg.pop(RG_ORDINAL, None)  # i16, only meaningful for encryption


# --------------------------------------------------------------------------------------------- concatenate


def _copy(src, start: int, end: int, sink) -> None:
    src.seek(start)
    remaining = end - start
    while remaining:
        data = src.read(min(COPY_CHUNK, remaining))
        if not len(data):
            raise ShallowMergeRefused(f"source ended early while copying [{start}, {end})")
        sink.write(data)
        remaining -= len(data)


def concatenate(
    sources: list[pa.NativeFile], sink: pa.NativeFile | BinaryIO, row_groups: list[list[int] | None] | None = None
) -> ConcatResult:
    """Write one Parquet file holding every row group of sources, in order, copied byte for byte
    (streamed in bounded chunks: never read a whole source into memory at once), under a new footer.
    sources are seekable input files (pyarrow open_input_file); raises ShallowMergeRefused when
    shallow_merge_refusal says so. Keeps the first source's key-value metadata (the ARROW:schema
    entry must stay valid so pyarrow restores types incl. timestamp tz). row_groups optionally names, per
    source, the row groups to keep (None keeps all of that source's)."""
    if not sources:
        raise ShallowMergeRefused("no input files")
    opened = [_open(f, n) for n, f in enumerate(sources)]
    if row_groups is not None and len(row_groups) != len(sources):
        raise ValueError(f"row_groups names {len(row_groups)} sources, there are {len(sources)}")
    reason = shallow_merge_refusal([s.arrow_md for s in opened])
    if reason is not None:
        raise ShallowMergeRefused(reason)

    # Plan every copy before writing a byte, so a refusal never leaves a half-written sink.
    plan: list[tuple[_Source, int, int, int]] = []  # (source, start, end, delta)
    new_row_groups: list[dict] = []
    pos = len(MAGIC)
    total_rows = 0
    for n, src in enumerate(opened):
        size = _size(src.f)
        groups = src.footer.get(FMD_ROW_GROUPS) or []
        chosen = row_groups[n] if row_groups is not None else None
        keep = range(len(groups)) if chosen is None else chosen
        for index in keep:
            if not 0 <= index < len(groups):
                raise ValueError(f"file {n} has no row group {index} (it has {len(groups)})")
            rg = groups[index]
            total_rows += src.arrow_md.row_group(index).num_rows
            start, end = _row_group_span(rg, n, size)
            delta = pos - start
            _relocate(rg, delta)
            new_row_groups.append(rg)
            if plan and plan[-1][0] is src and plan[-1][2] == start:
                prev = plan[-1]
                plan[-1] = (src, prev[1], end, prev[3])  # contiguous with the previous row group: one copy
            else:
                plan.append((src, start, end, delta))
            pos += end - start

    footer = dict(opened[0].footer)
    footer[FMD_ROW_GROUPS] = new_row_groups
    footer[FMD_NUM_ROWS] = total_rows
    raw = encode_footer(footer)
    tail = struct.pack("<I", len(raw)) + MAGIC

    # Check the new footer before writing: pyarrow must read it back with the expected shape.
    check = pq.read_metadata(pa.BufferReader(MAGIC + raw + tail))
    if check.num_rows != total_rows or check.num_row_groups != len(new_row_groups):
        raise RuntimeError("re-encoded footer does not read back as written")
    if not check.schema.equals(opened[0].arrow_md.schema):
        raise RuntimeError("re-encoded footer changed the schema")

    sink.write(MAGIC)
    written = len(MAGIC)
    for src, start, end, _ in plan:
        _copy(src.f, start, end, sink)
        written += end - start
    sink.write(raw)
    sink.write(tail)
    written += len(raw) + len(tail)
    return ConcatResult(rows=total_rows, row_groups=len(new_row_groups), bytes_written=written)


class RowGroupAppender:
    """One Parquet file written from whole Parquet files handed over one at a time, in order: each one's row groups
    are copied byte for byte as it arrives (so only the file in hand is held), the footer by close().

    Meant for pieces of one writer (the same schema and codecs), such as row groups encoded on several threads. A
    piece unlike the first is refused with ShallowMergeRefused after earlier pieces were written: the caller
    discards the sink then (concatenate() is the one that refuses before writing)."""

    def __init__(self, sink: pa.NativeFile | BinaryIO) -> None:
        self.sink = sink
        self.first: _Source | None = None
        self.row_groups: list[dict] = []
        self.rows = 0
        self.position = 0
        self.pieces = 0

    def add(self, piece: pa.NativeFile) -> None:
        source = _open(piece, self.pieces)
        if self.first is None:
            self.first = source
            self.sink.write(MAGIC)
            self.position = len(MAGIC)
        else:
            reason = shallow_merge_refusal([self.first.arrow_md, source.arrow_md])
            if reason is not None:
                raise ShallowMergeRefused(f"piece {self.pieces}: {reason}")
        size = _size(piece)
        for index, group in enumerate(source.footer.get(FMD_ROW_GROUPS) or []):
            start, end = _row_group_span(group, self.pieces, size)
            _relocate(group, self.position - start)
            _copy(piece, start, end, self.sink)
            self.position += end - start
            self.row_groups.append(group)
            self.rows += source.arrow_md.row_group(index).num_rows
        self.pieces += 1

    def close(self) -> ConcatResult:
        if self.first is None:
            raise ShallowMergeRefused("no pieces were added")
        footer = dict(self.first.footer)
        footer[FMD_ROW_GROUPS] = self.row_groups
        footer[FMD_NUM_ROWS] = self.rows
        raw = encode_footer(footer)
        self.sink.write(raw)
        self.sink.write(struct.pack("<I", len(raw)) + MAGIC)
        written = self.position + len(raw) + 8
        return ConcatResult(rows=self.rows, row_groups=len(self.row_groups), bytes_written=written)

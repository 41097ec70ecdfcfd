"""Fast generators of benchmark inputs for the demo table (all records valid, ISO UTC times):
``write_jsonl_gz_objects`` (many objects of about a given compressed size) and ``write_big_object`` (one
huge object, streamed)."""

from __future__ import annotations

import random
import struct
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo

from siltlake.demo.sample import TABLE, staging_key
from siltlake.demo.traffic import US, RecordMaker, json_line, local_midnight_us, utc

_POOL_SIZE = 32_768


def _line_pool(seed: int):
    """A pyarrow string array of line tails: everything after the time value, newline included."""
    import pyarrow as pa

    rng = random.Random(seed)
    maker = RecordMaker(rng)
    hosts = [f"web{i:02d}" for i in range(1, 9)]
    tails = []
    for _ in range(_POOL_SIZE):
        text = json_line(maker.record(rng.choice(hosts)))
        tails.append('", ' + text[1:] + "\n")
    return pa.array(tails, pa.string())


def _time_parts(times_us) -> list:
    """ISO UTC spellings of ascending times as two string arrays: 'YYYY-MM-DDTHH:MM:SS.' and the
    six-digit fraction with 'Z'. Formatting each distinct second once is much faster than strftime."""
    import pyarrow as pa
    import pyarrow.compute as pc

    seconds = pc.divide(times_us, US)  # integer division: times are positive
    fraction = pc.subtract(times_us, pc.multiply(seconds, US))
    first, last = seconds[0].as_py(), seconds[-1].as_py()
    if last - first >= len(times_us):  # sparse times: format each one
        prefix = pc.strftime(seconds.cast(pa.timestamp("s", tz="UTC")), format="%Y-%m-%dT%H:%M:%S.")
    else:
        spelled = [utc(second * US).strftime("%Y-%m-%dT%H:%M:%S.") for second in range(first, last + 1)]
        prefix = pa.array(spelled, pa.string()).take(pc.subtract(seconds, first))
    return [
        prefix,
        pc.binary_join_element_wise(pc.utf8_lpad(pc.cast(fraction, pa.string()), 6, "0"), "Z", ""),
    ]


def _lines_buffer(pool, times_us, pick_seed: int):
    """Bytes of JSON lines, one per (ascending) time, the rest of each line from the pool, without a
    Python loop per line. Consecutive pool entries from a seeded start keep lines varied; the pool
    is far larger than the gzip window so repeats do not inflate the compression ratio."""
    import pyarrow as pa
    import pyarrow.compute as pc

    count = len(times_us)
    offset = random.Random(pick_seed).randrange(len(pool))
    tails: list[pa.Array] = []
    while sum(len(t) for t in tails) < count:
        tails.append(pool[offset : offset + count - sum(len(t) for t in tails)])
        offset = 0
    tail = tails[0] if len(tails) == 1 else pa.concat_arrays(tails)
    lines = pc.binary_join_element_wise('{"time": "', *_time_parts(times_us), tail, "")
    offsets = lines.buffers()[1]
    first = struct.unpack_from("<i", offsets, 4 * lines.offset)[0]
    last = struct.unpack_from("<i", offsets, 4 * (lines.offset + count))[0]
    return lines.buffers()[2].slice(first, last - first)


def _spread_times(start_us: int, span_us: int, count: int, seed: int):
    """count ascending times over [start_us, start_us + span_us), evenly spaced with jitter."""
    import pyarrow as pa
    import pyarrow.compute as pc

    step = span_us / count
    base = pc.multiply(pa.array(range(count), pa.float64()), step)
    jitter = pc.multiply(pc.random(count, initializer=seed), step)
    offsets = pc.cast(pc.floor(pc.add(base, jitter)), pa.int64())
    return pc.add(offsets, start_us)


def _bytes_per_line(pool, compresslevel: int, seed: int, step_us: float, piece_lines: int | None = None) -> float:
    """Compressed bytes per line with lines step_us apart, measured on a calibration run: one
    whole stream, or with piece_lines, one flushed piece as ``write_big_object`` makes them."""
    count = min(piece_lines or 20_000, 40_000)
    times = _spread_times(1_790_000_000 * US, max(count, round(count * step_us)), count, seed)
    data = _lines_buffer(pool, times, seed)
    if piece_lines is None:
        return len(zlib.compress(data, compresslevel)) / count
    dictionary = bytes(_lines_buffer(pool, times[:200], seed + 1))[-32_768:]
    return len(_deflate_piece(data, dictionary, compresslevel, last=False)) / count


def _lines_for(
    target_bytes: int, span_us: int, pool, compresslevel: int, seed: int, piece_lines: int | None = None
) -> int:
    """How many lines spread over span_us compress to about target_bytes (two calibration rounds:
    the spacing of the times changes how well they compress)."""
    lines = max(1, round(target_bytes / 25))
    for _ in range(2):
        per_line = _bytes_per_line(pool, compresslevel, seed, span_us / lines, piece_lines)
        lines = max(1, round(target_bytes / per_line))
    return lines


def _gzip_stream(level: int):
    return zlib.compressobj(level, zlib.DEFLATED, 31)


def write_jsonl_gz_objects(
    directory: str | Path,
    count: int,
    target_bytes: int,
    seed: int = 7,
    *,
    start: date = date(2026, 11, 20),
    days: int = 2,
    timezone: str = "Asia/Tokyo",
    workers: int = 2,
    compresslevel: int = 6,
) -> tuple[int, int]:
    """Write count valid gzip JSON-lines objects of about target_bytes compressed each.

    directory is a staging root: objects go to ``fluentd01.web.access/YYYY/MM/DD/<server>-<seq>.jsonl.gz``
    (UTC shipping date). Object i covers the i-th slice of the local days ``start`` ..
    ``start + days - 1``, so most objects touch one partition date. Records have the shape of
    the sample (ISO UTC times with microseconds). Returns (records, compressed bytes).
    """
    if count < 1 or target_bytes < 1:
        raise ValueError("count and target_bytes must be at least 1")
    root = Path(directory)
    pool = _line_pool(seed)
    zone = ZoneInfo(timezone)
    start_us = local_midnight_us(start, zone)
    span_us = days * 86_400 * US // count
    lines_per_object = _lines_for(target_bytes - 20, span_us, pool, compresslevel, seed)
    servers = 4

    def write(index: int) -> tuple[int, int]:
        object_start = start_us + index * span_us
        times = _spread_times(object_start, span_us, lines_per_object, seed * 1_000_003 + 2 * index)
        buffer = _lines_buffer(pool, times, seed * 1_000_003 + 2 * index + 1)
        stream = _gzip_stream(compresslevel)
        data = stream.compress(buffer) + stream.flush()
        server = f"web{index % servers + 1:02d}"
        shipped = object_start + span_us + 30 * US
        path = root / staging_key("fluentd01", TABLE, shipped, server, index // servers + 1, "jsonl.gz")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return lines_per_object, len(data)

    with ThreadPoolExecutor(max(1, workers)) as pool_executor:
        results = list(pool_executor.map(write, range(count)))
    return sum(r for r, _ in results), sum(b for _, b in results)


def _deflate_piece(data, dictionary: bytes | None, level: int, last: bool) -> bytes:
    """Raw deflate of one piece of a larger stream, primed with the previous 32 KiB (as pigz does)."""
    if dictionary:
        stream = zlib.compressobj(level, zlib.DEFLATED, -15, zdict=dictionary)
    else:
        stream = zlib.compressobj(level, zlib.DEFLATED, -15)
    return stream.compress(data) + stream.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def write_big_object(
    path: str | Path,
    target_bytes: int,
    seed: int = 7,
    *,
    start: date = date(2026, 11, 20),
    timezone: str = "Asia/Tokyo",
    compresslevel: int = 6,
    chunk_lines: int = 65_536,
    workers: int = 2,
) -> tuple[int, int]:
    """Stream one gzip JSON-lines object (a single gzip member) of about target_bytes to path.

    Lines are made chunk by chunk and deflated in parallel pieces primed with the previous piece's
    last 32 KiB, so memory stays at a few chunks whatever the size and the output is one ordinary
    gzip stream. Events cover the local day ``start`` in order. Returns (records, compressed bytes).
    """
    if target_bytes < 1:
        raise ValueError("target_bytes must be at least 1")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pool = _line_pool(seed)
    total = _lines_for(target_bytes - 18, 86_400 * US, pool, compresslevel, seed, chunk_lines)
    start_us = local_midnight_us(start, ZoneInfo(timezone))
    step_us = 86_400 * US / total
    crc = raw_size = records = chunk = 0
    dictionary: bytes | None = None
    pending: deque = deque()
    with open(path, "wb") as out, ThreadPoolExecutor(max(1, workers)) as executor:
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # gzip header: no name, no mtime
        while records < total:
            lines = min(chunk_lines, total - records)
            first_us = start_us + round(records * step_us)
            chunk_seed = seed * 1_000_003 + 2 * chunk
            times = _spread_times(first_us, max(1, round(lines * step_us)), lines, chunk_seed)
            buffer = _lines_buffer(pool, times, chunk_seed + 1)
            records += lines
            chunk += 1
            crc = zlib.crc32(buffer, crc)
            raw_size += buffer.size
            last = records >= total
            pending.append(executor.submit(_deflate_piece, buffer, dictionary, compresslevel, last))
            dictionary = bytes(buffer[max(0, buffer.size - 32_768) :])
            while len(pending) > 2 * max(1, workers) or (last and pending):
                out.write(pending.popleft().result())
        out.write(struct.pack("<II", crc & 0xFFFFFFFF, raw_size & 0xFFFFFFFF))
        written = out.tell()
    return records, written

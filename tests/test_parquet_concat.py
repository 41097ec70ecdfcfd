"""Shallow Parquet merge: row groups copied byte for byte under a new footer."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.merge.parquet_concat import (
    ConcatResult,
    ShallowMergeRefused,
    concatenate,
    shallow_merge_refusal,
)

SCHEMA = pa.schema(
    [
        pa.field("t", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("host", pa.string()),
        pa.field("user_id", pa.int64()),
        pa.field("status", pa.int32()),
        pa.field("latency", pa.float64()),
        pa.field("d", pa.decimal128(10, 2)),
    ]
)
BASE = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def make_table(seed: int, rows: int = 200) -> pa.Table:
    rnd = random.Random(seed)
    start = BASE + dt.timedelta(hours=seed)
    times = sorted(start + dt.timedelta(seconds=rnd.randrange(3600)) for _ in range(rows))

    def maybe(v):
        return None if rnd.random() < 0.1 else v

    return pa.table(
        {
            "t": times,
            "host": [maybe(f"host-{rnd.randrange(8)}") for _ in range(rows)],
            "user_id": [maybe(rnd.randrange(10**9)) for _ in range(rows)],
            "status": [maybe(rnd.choice([200, 301, 404, 500])) for _ in range(rows)],
            "latency": [maybe(rnd.random() * 3) for _ in range(rows)],
            "d": [maybe(decimal.Decimal(rnd.randrange(10**6)) / 100) for _ in range(rows)],
        },
        schema=SCHEMA,
    )


def write(tmp_path: Path, name: str, table: pa.Table, **kwargs) -> Path:
    kwargs.setdefault("compression", "zstd")
    path = tmp_path / name
    pq.write_table(table, path, **kwargs)
    return path


def concat_paths(paths: list[Path], out: Path) -> ConcatResult:
    sources = [pa.OSFile(str(p), "rb") for p in paths]
    try:
        with pa.OSFile(str(out), "wb") as sink:
            return concatenate(sources, sink)
    finally:
        for s in sources:
            s.close()


AGGREGATES = (
    "select count(*), count(host), sum(user_id), sum(status), round(sum(latency), 6), sum(d),"
    " epoch_us(min(t)), epoch_us(max(t)), count(distinct host) from read_parquet(?)"
)


def duck_aggregates(path: Path | list[Path]) -> tuple:
    arg = [str(p) for p in path] if isinstance(path, list) else str(path)
    return duckdb.execute(AGGREGATES, [arg]).fetchone()


def check_merged(paths: list[Path], out: Path, result: ConcatResult) -> None:
    inputs = [pq.read_table(p) for p in paths]
    expected = pa.concat_tables(inputs)
    merged = pq.read_table(out)
    assert merged.schema.equals(expected.schema, check_metadata=False)
    assert merged.schema.field("t").type == pa.timestamp("us", tz="UTC")
    assert merged.equals(expected)
    assert result.rows == expected.num_rows
    assert result.bytes_written == out.stat().st_size

    # DuckDB agrees with itself on the inputs.
    assert duck_aggregates(out) == duck_aggregates(paths)
    assert duckdb.execute("select count(*) from read_parquet(?) where status = 404", [str(out)]).fetchone()[0] == (
        sum(pa.compute.sum(pa.compute.equal(t["status"], 404)).as_py() or 0 for t in inputs)
    )

    # Row groups: count, statistics and bytes are the sources'.
    out_md = pq.read_metadata(out)
    src_mds = [pq.read_metadata(p) for p in paths]
    assert result.row_groups == out_md.num_row_groups == sum(m.num_row_groups for m in src_mds)
    out_bytes = out.read_bytes()
    k = 0
    for p, md in zip(paths, src_mds, strict=True):
        src_bytes = p.read_bytes()
        for i in range(md.num_row_groups):
            src_rg, out_rg = md.row_group(i), out_md.row_group(k)
            k += 1
            assert out_rg.num_rows == src_rg.num_rows
            for j in range(md.num_columns):
                a, b = src_rg.column(j), out_rg.column(j)
                assert a.statistics == b.statistics
                a_start = a.dictionary_page_offset if a.has_dictionary_page else a.data_page_offset
                b_start = b.dictionary_page_offset if b.has_dictionary_page else b.data_page_offset
                assert a.total_compressed_size == b.total_compressed_size
                n = a.total_compressed_size
                assert out_bytes[b_start : b_start + n] == src_bytes[a_start : a_start + n]
            t_stats = out_rg.column(0).statistics
            assert t_stats.has_min_max
            assert t_stats.min == pq.read_table(p).column("t")[0].as_py() or i > 0


def test_concat_three_zstd(tmp_path: Path) -> None:
    paths = [write(tmp_path, f"in{i}.parquet", make_table(i)) for i in range(3)]
    out = tmp_path / "out.parquet"
    result = concat_paths(paths, out)
    check_merged(paths, out, result)
    # The first source's key-value metadata (ARROW:schema) is kept.
    assert pq.read_metadata(out).metadata == pq.read_metadata(paths[0]).metadata


def test_concat_fifty_with_many_row_groups(tmp_path: Path) -> None:
    paths = [
        write(tmp_path, f"in{i}.parquet", make_table(i, rows=30 + i * 7), row_group_size=40 if i % 5 == 0 else None)
        for i in range(50)
    ]
    out = tmp_path / "out.parquet"
    result = concat_paths(paths, out)
    assert result.row_groups > 50
    check_merged(paths, out, result)


def test_concat_dictionary_strings_snappy(tmp_path: Path) -> None:
    paths = [
        write(tmp_path, f"in{i}.parquet", make_table(i), compression="snappy", use_dictionary=["host"])
        for i in range(4)
    ]
    assert pq.read_metadata(paths[0]).row_group(0).column(1).has_dictionary_page
    out = tmp_path / "out.parquet"
    check_merged(paths, out, concat_paths(paths, out))
    # Dictionary decoding into the dictionary type still works.
    merged = pq.read_table(out, read_dictionary=["host"])
    assert pa.types.is_dictionary(merged.schema.field("host").type)


def test_repeated_concatenation(tmp_path: Path) -> None:
    a, b, c = (write(tmp_path, f"{n}.parquet", make_table(i)) for i, n in enumerate("abc"))
    ab, ab_c, abc = tmp_path / "ab.parquet", tmp_path / "ab_c.parquet", tmp_path / "abc.parquet"
    concat_paths([a, b], ab)
    r1 = concat_paths([ab, c], ab_c)
    r2 = concat_paths([a, b, c], abc)
    assert pq.read_table(ab_c).equals(pq.read_table(abc))
    assert (r1.rows, r1.row_groups, r1.bytes_written) == (r2.rows, r2.row_groups, r2.bytes_written)
    assert ab_c.read_bytes() == abc.read_bytes()
    check_merged([ab, c], ab_c, r1)
    assert duck_aggregates(ab_c) == duck_aggregates(abc)


def test_page_index_and_bloom_filters_dropped(tmp_path: Path) -> None:
    kwargs: dict = {"write_page_index": True, "data_page_size": 512}
    try:
        pq.write_table(make_table(0), tmp_path / "probe.parquet", bloom_filter_options={"host": True}, **kwargs)
        kwargs["bloom_filter_options"] = {"host": True, "user_id": True}
    except TypeError:
        pass  # this pyarrow cannot write bloom filters
    paths = [write(tmp_path, f"in{i}.parquet", make_table(i, rows=500), **kwargs) for i in range(3)]
    src = pq.read_metadata(paths[1]).row_group(0)
    assert src.column(0).has_column_index and src.column(0).has_offset_index
    if "bloom_filter_options" in kwargs:
        assert src.column(1).bloom_filter_offset is not None
    out = tmp_path / "out.parquet"
    check_merged(paths, out, concat_paths(paths, out))
    col = pq.read_metadata(out).row_group(1).column(1)
    assert not col.has_column_index and not col.has_offset_index
    assert col.bloom_filter_offset is None
    # Filtered reads (where readers would consult page indexes and bloom filters) still work.
    want = pa.concat_tables(pq.read_table(p) for p in paths).filter(pa.compute.field("host") == "host-3")
    got = pq.read_table(out, filters=[("host", "=", "host-3")])
    assert got.equals(want)
    n = duckdb.execute("select count(*) from read_parquet(?) where host = 'host-3'", [str(out)]).fetchone()[0]
    assert n == want.num_rows


def test_sink_may_be_python_file_and_sources_buffers(tmp_path: Path) -> None:
    import io

    tables = [make_table(i, rows=50) for i in range(3)]
    bufs = []
    for t in tables:
        b = io.BytesIO()
        pq.write_table(t, b, compression="zstd")
        bufs.append(pa.BufferReader(b.getvalue()))
    sink = io.BytesIO()
    result = concatenate(bufs, sink)
    assert result.bytes_written == len(sink.getvalue())
    assert pq.read_table(io.BytesIO(sink.getvalue())).equals(pa.concat_tables(tables))


# --------------------------------------------------------------------------------------------- refusals


def _refusal(tmp_path: Path, other: Path) -> str:
    first = write(tmp_path, "first.parquet", make_table(0))
    out = tmp_path / "refused.parquet"
    with pytest.raises(ShallowMergeRefused) as info:
        concat_paths([first, other], out)
    assert out.stat().st_size == 0  # nothing written
    return info.value.reason


def test_refuse_column_order(tmp_path: Path) -> None:
    t = make_table(1)
    other = write(tmp_path, "other.parquet", t.select(["host", "t", "user_id", "status", "latency", "d"]))
    assert "column order differs" in _refusal(tmp_path, other)


def test_refuse_type(tmp_path: Path) -> None:
    t = make_table(1)
    t = t.set_column(3, pa.field("status", pa.int64()), t["status"].cast(pa.int64()))
    reason = _refusal(tmp_path, write(tmp_path, "other.parquet", t))
    assert "'status' type differs" in reason


def test_refuse_timezone(tmp_path: Path) -> None:
    t = make_table(1)
    t = t.set_column(
        0,
        pa.field("t", pa.timestamp("us", tz="Asia/Tokyo"), nullable=False),
        t["t"].cast(pa.timestamp("us", tz="Asia/Tokyo")),
    )
    assert "'t' type differs" in _refusal(tmp_path, write(tmp_path, "other.parquet", t))


def test_refuse_nullability(tmp_path: Path) -> None:
    t = make_table(1)
    t = t.cast(pa.schema([f.with_nullable(True) for f in SCHEMA]))
    assert "nullability differs" in _refusal(tmp_path, write(tmp_path, "other.parquet", t))


def test_refuse_codec(tmp_path: Path) -> None:
    other = write(tmp_path, "other.parquet", make_table(1), compression="snappy")
    reason = _refusal(tmp_path, other)
    assert "codec differs" in reason and "SNAPPY" in reason


def test_refuse_not_parquet(tmp_path: Path) -> None:
    other = tmp_path / "other.parquet"
    other.write_bytes(b"this is not a parquet file, just some text\n" * 3)
    assert "not Parquet" in _refusal(tmp_path, other)
    tiny = tmp_path / "tiny.parquet"
    tiny.write_bytes(b"PAR1")
    assert "not Parquet" in _refusal(tmp_path, tiny)


def test_refusal_from_footers_only(tmp_path: Path) -> None:
    a = pq.read_metadata(write(tmp_path, "a.parquet", make_table(0)))
    b = pq.read_metadata(write(tmp_path, "b.parquet", make_table(1)))
    c = pq.read_metadata(write(tmp_path, "c.parquet", make_table(2), compression="gzip"))
    assert shallow_merge_refusal([a, b]) is None
    assert "codec differs" in shallow_merge_refusal([a, b, c])
    assert shallow_merge_refusal([]) == "no input files"


@pytest.mark.spark
def test_spark_reads_merged(tmp_path: Path, spark) -> None:
    paths = [write(tmp_path, f"in{i}.parquet", make_table(i)) for i in range(3)]
    out = tmp_path / "merged" / "out.parquet"
    out.parent.mkdir()
    concat_paths(paths, out)
    expected = pq.read_table(out)
    df = spark.read.parquet(str(out.parent))
    assert df.count() == expected.num_rows
    got = df.selectExpr("sum(user_id)", "sum(status)").collect()[0]
    assert got[0] == pa.compute.sum(expected["user_id"]).as_py()
    assert got[1] == pa.compute.sum(expected["status"]).as_py()

"""A merge's small objects decoded in one DuckDB scan when they are alike (docs/design.md, "Merge").

pyarrow decodes a small object for about 0.1 ms a column chunk however few its rows, on threads that share the
GIL for each file's set-up: 100 objects of 500 rows took 47 ms, DuckDB's one `read_parquet` over the same files
20 ms (2,000 objects: 760 against 400 ms). DuckDB takes the first file's columns and casts every other file to
them, so one scan is faithful only when every file has the same schema: it is used when their footers are equal
(columns, types, nullability and field ids), the columns read are all there with the types the merge wants, and
those types are ones DuckDB hands back to Arrow unchanged. Anything else decodes as before, object by object.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from siltlake.coltypes import FIELD_ID_KEY
from siltlake.merge.footers import raw_footer, schema_prefix

# Inputs up to this many bytes: the scan's result is whole in memory at once, as object-by-object decoding's
# is, but DuckDB's own buffers come on top of it; larger (Spark-side) merges keep the bounded column join.
MAX_SCAN_BYTES = 256 << 20
_SCANNED_TYPES = (
    pa.types.is_boolean,
    pa.types.is_int32,
    pa.types.is_int64,
    pa.types.is_float32,
    pa.types.is_float64,
    pa.types.is_string,
    pa.types.is_date32,
    pa.types.is_decimal128,
)

ARROW_SCHEMA_KEY = b"ARROW:schema"
LOCAL_SCAN_SETTINGS = {"async_threads": 0, "enable_external_file_cache": False}

_database = None
_database_lock = threading.Lock()
_opening: threading.Thread | None = None


def same_schema(found: pa.Schema, wanted: pa.Schema) -> bool:
    """Whether an object's schema is `wanted`: the same columns, types and nullability, and field ids."""
    return found.equals(wanted) and [(f.metadata or {}).get(FIELD_ID_KEY) for f in found] == [
        (f.metadata or {}).get(FIELD_ID_KEY) for f in wanted
    ]


def scannable(found: pa.Schema, wanted: pa.Schema) -> bool:
    """Whether a scan of files of schema `found` reads `wanted`'s columns exactly as the files hold them."""
    for target in wanted:
        index = found.get_field_index(target.name)
        if index < 0 or not found.field(index).type.equals(target.type) or not _scanned_type(target.type):
            return False
    return True


def _scanned_type(data_type: pa.DataType) -> bool:
    if pa.types.is_timestamp(data_type):  # instants: DuckDB's TIMESTAMPTZ, microseconds
        return data_type.unit == "us" and data_type.tz is not None
    return any(check(data_type) for check in _SCANNED_TYPES)


def scan_alike(paths: list[str], wanted: pa.Schema, sort_by: str | None = None) -> pa.Table | None:
    """The rows of local Parquet files in path order as `wanted`, in one scan; None when they are not alike.
    With `sort_by`, the rows come sorted by that column as a stable sort of them in path order would leave them
    (DuckDB sorts on its threads by the column, then each row's file and place in it).

    Alike is told from the footers' bytes (merge/footers.py): every file's begins with the first file's up to
    the end of its schema, and holds the first file's Arrow schema (the types pyarrow would decode them as)."""
    with pq.ParquetFile(paths[0]) as first_file:
        first = first_file.schema_arrow
        arrow_schema = (first_file.metadata.metadata or {}).get(ARROW_SCHEMA_KEY)
    if not scannable(first, wanted):
        return None
    first_footer = raw_footer(paths[0])
    prefix = schema_prefix(first_footer) if first_footer is not None else None
    if prefix is None:
        return None
    for path in paths[1:]:
        footer = raw_footer(path)
        if (
            footer is None
            or not footer.startswith(prefix)
            or (ARROW_SCHEMA_KEY not in footer if arrow_schema is None else arrow_schema not in footer)
        ):
            return None
    listed = ", ".join("'" + path.replace("'", "''") + "'" for path in paths)
    columns = ", ".join('"' + name.replace('"', '""') + '"' for name in wanted.names)
    query = f"SELECT {columns} FROM read_parquet([{listed}])"
    # file_index and file_row_number are DuckDB's virtual columns (1.3 on); a file column of either name hides it.
    sorted_in_scan = sort_by is not None and not {"file_index", "file_row_number"} & set(first.names)
    if sorted_in_scan and sort_by is not None:  # sorted_in_scan says it is set
        query += f' ORDER BY "{sort_by.replace(chr(34), chr(34) * 2)}" NULLS LAST, file_index, file_row_number'
    cursor = _connection().cursor()
    try:
        scanned = cursor.sql(query).to_arrow_table()
    except Exception:  # the files are decoded object by object instead
        # A scan that failed (a file gone, DuckDB out of memory): the object-by-object path reads the files
        # again and reports what it finds in the merge's own terms (a missing input counts against the job).
        return None
    finally:
        cursor.close()
    # TIMESTAMPTZ comes back labelled with the session's zone and every column as nullable: the same values as
    # the files hold, under the merge's own field types. An unsorted scan hands back a chunk a file: the sort and the
    # takes that follow are 2-3x faster on whole columns. A sorted scan's chunks are few and read in order.
    table = pa.Table.from_arrays(
        [scanned.column(i).cast(target.type) for i, target in enumerate(wanted)], schema=wanted
    )
    if sorted_in_scan:
        return table
    table = table.combine_chunks()
    if sort_by is not None:
        return table.take(pc.sort_indices(table, sort_keys=[(sort_by, "ascending")]))
    return table


def open_in_background() -> None:
    """Start opening this process's database on a thread of its own, once: a worker that has just claimed jobs
    on a local lake is likely to scan, and the opening (20-30 ms) then overlaps the jobs' planning. The worker
    calls opened() before it ends: a process must not exit while DuckDB is half open."""
    global _opening
    if _database is None and _opening is None:  # called from the worker's one claiming thread
        _opening = threading.Thread(target=_connection, daemon=True, name="merge-scan-open")
        _opening.start()


def opened() -> None:
    """Wait for an opening open_in_background started."""
    if _opening is not None:
        _opening.join()


def _connection():  # a DuckDB connection
    """This process's in-memory database (opening one costs 20-30 ms), cursors of it per scan."""
    global _database
    with _database_lock:
        if _database is None:
            import duckdb

            config = {"threads": max(1, pa.cpu_count()), "preserve_insertion_order": True}
            try:
                # Local files read on the scan's own threads, not handed to I/O threads and back, and not kept in
                # DuckDB's file cache (a merge reads each file once): 100 objects 16.4 -> 12.5 ms, 2,000 350 -> 290 ms.
                _database = duckdb.connect(config={**config, **LOCAL_SCAN_SETTINGS})
            except duckdb.Error:  # a DuckDB before these settings
                _database = duckdb.connect(config=config)
        return _database

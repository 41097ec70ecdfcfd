"""The merge task as the merge benchmark runs it bare (run_merge_task in this process), and the table it merges."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from inputs import (
    LOG_TABLE,
)

from siltlake.merge.task import MergeTask, RangeTask, run_merge_task
from siltlake.storage.filesystem import Storage
from siltlake.tabledef import TableDef


def table_def(mode: str, row_group_bytes: int | None = None) -> TableDef:
    data = LOG_TABLE.model_dump(by_alias=True)
    data["merge_mode"] = mode
    if row_group_bytes is not None:
        data["row_group_bytes"] = row_group_bytes
    return TableDef.from_mapping(data)


def parquet_stats(paths: list[Path]) -> dict:
    """Rows, files, bytes and row groups of Parquet output, and whether each row group is time-sorted."""
    rows = groups = 0
    in_order = True
    for path in paths:
        metadata = pq.ParquetFile(path).metadata
        rows += metadata.num_rows
        groups += metadata.num_row_groups
        with pq.ParquetFile(path) as handle:
            for index in range(metadata.num_row_groups):
                times = handle.read_row_group(index, columns=["time"]).column(0).cast(pa.int64())
                if len(times) > 1 and not pc.all(pc.greater_equal(times[1:], times[:-1])).as_py():
                    in_order = False
    return {
        "rows_written": rows,
        "files_written": len(paths),
        "row_groups": groups,
        "output_bytes": sum(p.stat().st_size for p in paths),
        "time_sorted_row_groups": in_order,
    }


def bare_task(
    lake: Storage,
    keys: list[str],
    small_bytes: int,
    output_key: str,
    mode: str,
    existing_key: str | None = None,
    row_group_bytes: int | None = None,
    upper: int = 0,
) -> MergeTask:
    definition = table_def(mode, row_group_bytes)
    planned = RangeTask(
        lower=0,
        upper=upper or len(keys),
        output_key=output_key,
        small_keys=tuple(keys),
        small_bytes=small_bytes,
        existing_key=existing_key,
    )
    return MergeTask(
        job_id=1,
        lake=lake,
        table_json=definition.to_json(),
        ranges=(planned,),
        row_group_bytes=definition.row_group_bytes,
        partition_date=dt.date(2024, 1, 1),
    )


def run_bare(task: MergeTask) -> dict:
    result = run_merge_task(task)
    if result["status"] != "ok":
        raise RuntimeError(f"merge task failed: {result.get('error')}\n{result.get('trace', '')}")
    return result

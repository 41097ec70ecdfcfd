"""A renamed column costs a read no memory: each read path of a table whose column was renamed (its objects hold the
column under the old name) peaks within 1.2x of the same read of the same rows never renamed, each measured as the
peak RSS of a fresh process (docs/design.md "Renamed columns, read in place")."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import siltlake
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .test_fast_sql import write_config_file
from .test_merge import DAY

DAYS = [DAY + dt.timedelta(days=n) for n in range(3)]
ROWS_PER_OBJECT = 250_000
OBJECTS_PER_DAY = 4

# Each read path, as a user writes it: `table` is the table, `action` the name its action column has now.
READS = {
    "to_pyarrow_dataset": "sum(b.num_rows for b in table.to_pyarrow_dataset().to_batches())",
    "a column of a day": "table.to_arrow(filter=pc.field('dt') == DAY, columns=['user_id']).num_rows",
    "filtered on the renamed column": (
        "table.scan(filter=f\"{action} = 'a3'\", columns=['user_id']).to_arrow().num_rows"
    ),
    "an expression on the renamed column": (
        "table.scan(filter=pc.field(action) == 'a3', columns=[action]).to_arrow().num_rows"
    ),
    "to_batches": "sum(b.num_rows for b in table.scan().to_batches())",
    "count": "table.scan().count()",
    "to_polars count": "table.to_polars().select(pl.len()).collect().item()",
    "to_polars filtered": "table.to_polars(filter=pc.field(action) == 'a3').select(pl.len()).collect().item()",
    "to_duckdb": "table.to_duckdb(duckdb.connect()).aggregate('count(*)').fetchall()[0][0]",
    "to_duckdb, an expression": (
        "table.to_duckdb(duckdb.connect(), filter=pc.field(action) == 'a3').aggregate('count(*)').fetchall()[0][0]"
    ),
}
READER = """
import datetime as dt, sys
import duckdb, polars as pl, pyarrow as pa, pyarrow.compute as pc, pyarrow.dataset
from siltlake import Lake
DAY = dt.date.fromisoformat(sys.argv[3])
with Lake.open('siltlake.toml') as lake:
    table, action = lake.table(sys.argv[1]), sys.argv[2]
    table.scan().files()  # the catalog and the imports, before the read
    print(eval(sys.stdin.read()))
# The peak of this process's own memory (ru_maxrss would count the forking test process's from before the exec).
print(next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')))
"""


def rows(day: dt.date, seed: int) -> pa.Table:
    count = ROWS_PER_OBJECT
    start = dt.datetime.combine(day, dt.time(3), tzinfo=dt.UTC)
    times = pa.array(
        [start + dt.timedelta(microseconds=37 * n + seed) for n in range(count)], pa.timestamp("us", tz="UTC")
    )
    ids = pa.array(range(seed, seed + count), pa.int64())
    labels = pc.binary_join_element_wise("a", pc.cast(pc.bit_wise_and(ids, 7), pa.string()), "")
    padding = pa.array([f"{n:024d}" for n in range(count)])  # a column of some weight, never read by name
    return pa.table({"utc_event_time": times, "user_id": ids, "action": labels, "referrer": padding})


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)  # memory, not the catalog: one is enough
@pytest.mark.slow  # three million rows, read in a fresh process per read path
def test_reads_after_a_rename_use_the_memory_of_a_table_never_renamed(tmp_path: Path, catalog_url: str) -> None:
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    try:
        for name in ("plain", "renamed"):
            deployment.catalog.tables.create(
                TableDef.from_mapping(
                    {
                        **ACCESS_TABLE,
                        "name": name,
                        "columns": [*ACCESS_TABLE["columns"], {"name": "referrer", "type": "string"}],
                    }
                )
            )
        lake = Lake(deployment)
        for name in ("plain", "renamed"):
            for day in DAYS:
                for n in range(OBJECTS_PER_DAY):
                    lake.table(f"web.{name}").append(rows(day, n * ROWS_PER_OBJECT))
        lake.table("web.renamed").rename_column("action", "event")
        write_config_file(deployment.config, tmp_path)
    finally:
        deployment.close()
    tree = str(Path(siltlake.__file__).parents[1])
    peaks = {}
    for case, read in READS.items():
        answers, peaks[case] = [], []
        for table, action in (("web.plain", "action"), ("web.renamed", "event")):
            result = subprocess.run(
                [sys.executable, "-c", READER, table, action, DAY.isoformat()],
                input=read,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "PYTHONPATH": tree},
            )
            assert result.returncode == 0, (case, result.stderr)
            answer, peak = result.stdout.split()
            answers.append(answer)
            peaks[case].append(int(peak) / 1024)
        assert answers[0] == answers[1] and int(answers[0]) > 0, (case, answers)
    shown = {case: f"{plain:.0f} MB, renamed {renamed:.0f} MB" for case, (plain, renamed) in peaks.items()}
    print(shown)
    assert all(renamed <= 1.2 * plain for plain, renamed in peaks.values()), shown

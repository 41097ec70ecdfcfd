"""docs/reading.md, run as written: its Python, DuckDB and Spark examples and its `silt sql` lines, against a
deployment holding web.access as the quick start leaves it plus a second published version (version 1: 10 rows of
a day, version 2: 10 more)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.publish import publish_once

from .conftest import make_config
from .merge_helpers import add_small_objects, point_cli_at, rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo

READING = Path(__file__).resolve().parent.parent / "docs" / "reading.md"
BATCHES = [rows_for(DAY, 10, 0), rows_for(DAY, 10, 1)]


def section_blocks(language: str) -> list[str]:
    text = READING.read_text(encoding="utf-8")
    # Up to its Iceberg part, which runs in tests/test_iceberg_target.py (it needs the iceberg publish target).
    section = text.split("\n## Iceberg engines", 1)[0]
    return re.findall(rf"^```{language}\n(.*?)^```$", section, re.S | re.M)


def two_versions(deployment: Deployment) -> None:
    """web.access with one day: version 1 shows BATCHES[0], version 2 both batches."""
    table = make_table(deployment)
    for hour, batch in enumerate(BATCHES, start=12):
        add_small_objects(deployment, table, DAY, [batch])
        publish_once(deployment, now=tokyo(DAY, hour))


def run_example(code: str, capsys) -> list[str]:  # pytest's capsys
    capsys.readouterr()
    exec(compile(code, "docs/reading.md", "exec"), {})  # the documented example, as a user runs it
    return capsys.readouterr().out.splitlines()


def test_the_python_and_duckdb_examples_run(tmp_path: Path, catalog_url: str, monkeypatch, capsys) -> None:
    """No Spark: the Python and DuckDB examples need pyarrow and duckdb only."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    try:
        two_versions(deployment)
        point_cli_at(deployment, monkeypatch)  # Lake.open() finds the deployment as `silt` would
        examples = [code for code in section_blocks("python") if "spark" not in code]
        assert len(examples) == 3, "the Python, the SQL and the DuckDB example"
        python, sql_example, duckdb_example = examples
        printed = run_example(python, capsys)
        assert "(1, 2)" in printed and "10" in printed, printed
        assert f"{DAY.isoformat()} 2 2 append 20" in printed, printed  # the history's newest version
        first = tuple(sorted(Counter(row["action"] for row in BATCHES[0]).items()))
        printed = run_example(sql_example, capsys)
        assert printed == [f"duckdb {first}", f"['action', 'n'] {len(first)}", "[{'n': 20}]"], printed
        printed = run_example(duckdb_example, capsys)
    finally:
        deployment.close()
    actions = sorted(Counter(row["action"] for batch in BATCHES for row in batch).items())
    assert printed == [str(actions), str([(DAY, 20)]), str([(DAY, 10)])], printed


@pytest.mark.spark
def test_the_spark_examples_run(deployment: Deployment, monkeypatch, capsys) -> None:
    two_versions(deployment)
    silt = silt_in_process(deployment, monkeypatch)
    [spark_example] = [code for code in section_blocks("python") if "spark" in code]
    printed = "\n".join(run_example(spark_example, capsys))
    assert re.search(rf"\|\s*{DAY.isoformat()}\s*\|\s*20\s*\|", printed), printed  # groupBy("dt").count()
    assert re.search(r"^10$", printed, re.M), printed  # as of version 1
    first = sorted(Counter(row["action"] for row in BATCHES[0]).items())
    for action, count in first:  # the SQL's VERSION AS OF 1
        assert re.search(rf"\|\s*{action}\s*\|\s*{count}\s*\|", printed), printed
    [shell] = section_blocks("sh")
    outputs = []
    for line in shell.splitlines():
        assert line.startswith('silt sql "'), line
        query, options = line.removeprefix('silt sql "').split('"', 1)
        outputs.append(silt("sql", query, *options.split()))
    assert re.search(r"\b10\b", outputs[0]), outputs[0]  # VERSION AS OF 1
    assert outputs[1].split() == ["n", "20"], outputs[1]  # TIMESTAMP AS OF a later time: the newest version

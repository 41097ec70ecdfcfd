"""A bulk load into a lake on the local S3 endpoint: a failed task, resume, one commit; `silt sql`'s reader
(Spark over pyarrow tasks, without S3A) sees every row once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from siltlake.deployment import Deployment
from siltlake.load import LoadFailed, load, parse_load_config
from siltlake.read import sql

from . import test_load
from .test_load import config, csv_file

pytestmark = pytest.mark.spark


def test_a_load_into_s3_resumes_and_commits_once(s3_deployment: Deployment, tmp_path: Path) -> None:
    deployment = s3_deployment
    inputs, expected, good_bytes = test_load.inputs_with_a_broken_file(tmp_path)
    load_config = parse_load_config(config(inputs))
    state = tmp_path / "resume.yml"
    with pytest.raises(LoadFailed, match="only the failed tasks run"):
        load(deployment, load_config, state_path=str(state))
    assert [r is None for r in yaml.safe_load(state.read_text())["jobs"]["main"]["reports"]] == [False, False, True]
    waiting = [info.key for info in deployment.lake.list(f"{deployment.instance_key}/_tmp")]
    assert waiting and all(key.endswith(".parquet") for key in waiting), "the finished tasks' output waits on S3"

    (inputs / "c.csv.gz").write_bytes(good_bytes)
    report = load(deployment, load_config, state_path=str(state))
    (stats,) = report.jobs
    assert report.committed and stats.ran == 1 and (stats.records_in, stats.loaded) == (90, 90)
    ids = [row[0] for row in sql(deployment.spark(), "SELECT id FROM web.people ORDER BY id", deployment).collect()]
    assert ids == sorted(row[0] for row in expected)
    assert not list(deployment.lake.list(f"{deployment.instance_key}/_tmp")), "the run's temporaries are gone"
    again = load(deployment, load_config, state_path=str(state))
    assert again.already_committed


def test_a_load_with_a_sql_filter_reads_its_stage_input_from_s3(s3_deployment: Deployment, tmp_path: Path) -> None:
    # The sql stage reads the tasks' output (on S3) with Spark: through pyarrow tasks here, which lack S3A.
    test_load.test_sql_filter_and_line_filter_over_json_lines(s3_deployment, tmp_path)


def test_a_load_reads_its_inputs_from_s3_and_writes_its_error_files_there(
    s3_deployment: Deployment, tmp_path: Path
) -> None:
    """Input and error URIs that are not the lake's own go through the deployment's [storage.s3] too."""
    import json

    from siltlake.storage.filesystem import Storage

    deployment = s3_deployment
    bucket = deployment.lake.root.removeprefix("s3://").split("/", 1)[0]
    local = tmp_path / "in"
    local.mkdir()
    good = csv_file(local / "a.csv", 0, 25, bad=3) + csv_file(local / "b.csv.gz", 100, 15, gz=True)
    files = Storage(f"s3://{bucket}", deployment.lake.s3)
    for path in local.iterdir():
        with files.open_output(f"in/{path.name}") as out:
            out.write(path.read_bytes())
    load_config = parse_load_config(
        {
            **config(local),
            "in": {"path": f"s3://{bucket}/in/*.csv*"},
            "error": {"type": "file", "path": f"s3://{bucket}/load-errors"},
        }
    )
    report = load(deployment, load_config)
    (stats,) = report.jobs
    assert (stats.records_in, stats.loaded, stats.bad) == (43, 40, 3)
    ids = [row[0] for row in sql(deployment.spark(), "SELECT id FROM web.people ORDER BY id", deployment).collect()]
    assert ids == sorted(row[0] for row in good)
    kept = [json.loads(line) for info in files.list("load-errors/") for line in files.read_bytes(info.key).splitlines()]
    assert len(kept) == 3 and all(k["source"] == f"s3://{bucket}/in/a.csv" for k in kept)

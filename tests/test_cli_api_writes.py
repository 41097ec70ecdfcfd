"""`silt upsert` and `silt restore` are Table.upsert and Table.restore: the same rows written, the same versions and
the same report, run side by side on two identical tables (one written by the CLI, one by the Python API), on
both catalogs; a retryable conflict still exits 75."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import SiltError, UpdateConflict
from siltlake.lake import Lake, Table
from siltlake.publish import publish_once

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_table_writes import arrow_rows
from .test_upsert import KEYED, upsert_rows

pytestmark = pytest.mark.spark
NOW = "2026-11-20T10:00:00Z"  # --now's text (Tokyo 19:00 on DAY, after every other write); LATER the API's
LATER = dt.datetime(2026, 11, 20, 10)


def _contents(table: Table, **as_of: object) -> Counter:
    frame = table.to_arrow(columns=["utc_event_time", "user_id", "action", "dt"], **as_of)
    return Counter(zip(*(frame.column(c).to_pylist() for c in frame.column_names), strict=True))


def _history(table: Table) -> list[tuple]:
    """The versions as published, without what differs between two tables (names, object keys, clocks)."""
    return [(row["date"], row["version"], row["table_version"], row["op"], row["rows"]) for row in table.history()]


def _upserted(report, dry_run: bool = False) -> dict:
    """An UpsertReport as `silt upsert --json` prints it (less the table's name)."""
    return {
        "dry_run": dry_run,
        "request_id": report.request_id,
        "applied_before": report.message,
        "table_version": report.table_version,
        "partitions": [
            {
                "dt": p.partition_date.isoformat(),
                "rows": p.rows,
                "deleted_keys": p.deleted_keys,
                "version": p.version.version if p.version is not None else None,
                "delayed": p.delayed,
            }
            for p in report.partitions
        ],
    }


def _without_names(report: dict) -> dict:
    """A restore's JSON report less what names the table (its name, its objects' keys)."""
    return {
        **{k: v for k, v in report.items() if k != "table"},
        "partitions": [{k: v for k, v in p.items() if k != "object"} for p in report["partitions"]],
    }


def test_upsert_through_the_cli_and_the_api_is_the_same_write(
    deployment: Deployment, tmp_path: Path, monkeypatch
) -> None:
    silt = silt_in_process(deployment, monkeypatch)
    lake = Lake(deployment)
    for name in ("cli", "api"):
        record = make_table(deployment, name, **KEYED)
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 5, s) for s in range(2)])
    cli, api = lake.table("web.cli"), lake.table("web.api")
    rows = upsert_rows([0, 1, 1_000_001, 7], "new").append_column("gone", pa.array([False, True, False, False]))
    path = tmp_path / "rows.parquet"
    pq.write_table(rows, path)

    planned = json.loads(silt("upsert", "web.cli", str(path), "--delete-column", "gone", "--dry-run", "--json"))
    assert planned.pop("table") == "web.cli" and cli.version == 0
    assert planned == _upserted(api.upsert(rows, "gone", dry_run=True), dry_run=True) and api.version == 0
    assert planned["partitions"] == [
        {"dt": DAY.isoformat(), "rows": 4, "deleted_keys": 1, "version": None, "delayed": None}
    ]

    done = json.loads(
        silt("upsert", "web.cli", str(path), "--delete-column", "gone", "--now", NOW, "--request-id", "u1", "--json")
    )
    assert done.pop("table") == "web.cli"
    assert done == _upserted(api.upsert(rows, "gone", LATER, "u1"))
    assert done["table_version"] == 1 and _contents(cli) == _contents(api) and _history(cli) == _history(api)

    retried = json.loads(silt("upsert", "web.cli", str(path), "--request-id", "u1", "--json"))
    assert retried["applied_before"] == api.upsert(rows, request_id="u1").message is not None
    assert cli.version == api.version == 1

    # Rows from Spark SQL: --sql and query= read them alike.
    query = "SELECT timestamp'2026-11-19 21:00:00' AS utc_event_time, 5L AS user_id, 'sql' AS action"
    by_sql = json.loads(silt("upsert", "web.cli", "--sql", query, "--now", NOW, "--json"))
    assert by_sql.pop("table") == "web.cli" and by_sql == _upserted(api.upsert(query=query, now=LATER))
    assert _contents(cli) == _contents(api) and _history(cli) == _history(api)
    with pytest.raises(SiltError, match="give the rows or a query"):
        api.upsert(rows, query=query)

    # A conflict is retryable through the API and exits 75 through the CLI, which reaches it through Table.upsert.
    def conflict(*args: object, **kwargs: object) -> None:
        raise UpdateConflict("web.cli changed while the upsert ran; run it again")

    monkeypatch.setattr(Table, "upsert", conflict)
    assert "run it again" in silt("upsert", "web.cli", str(path), code=75)


def test_restore_through_the_cli_and_the_api_is_the_same_version(deployment: Deployment, monkeypatch) -> None:
    silt = silt_in_process(deployment, monkeypatch)
    lake = Lake(deployment)
    for name in ("cli", "api"):
        make_table(deployment, name)
        lake.table(f"web.{name}").append(arrow_rows(rows_for(DAY, 10, 0)), now=tokyo(DAY, 12))
    publish_once(deployment, now=tokyo(DAY, 13))
    cli, api = lake.table("web.cli"), lake.table("web.api")
    for table in (cli, api):
        table.delete("user_id < 3", dates=DAY, now=tokyo(DAY, 14))
    assert cli.version == api.version == 2

    planned = json.loads(silt("restore", "web.cli", "--version", "1", "--dry-run", "--json"))
    assert planned.pop("restored_version") == api.restore_target(version=1) == 1
    assert _without_names(planned) == {
        **_without_names(api.restore(version=1, dry_run=True).as_dict()),
        "dry_run": True,
    }
    assert cli.version == api.version == 2

    done = json.loads(
        silt("restore", "web.cli", "--version", "1", "--yes", "--now", NOW, "--request-id", "r1", "--json")
    )
    assert _without_names(done) == {
        **_without_names(api.restore(version=1, request_id="r1", now=LATER).as_dict()),
        "restored_version": 1,
        "dry_run": False,
    }
    assert done["table_version"] == 3 and _contents(cli) == _contents(api) == _contents(api, as_of_version=1)
    assert _history(cli) == _history(api)

    # By time: the version current then (the delete's), resolved alike.
    as_of = tokyo(DAY, 14) + dt.timedelta(minutes=30)
    text = as_of.isoformat() + "Z"
    assert api.restore_target(as_of=as_of) == 2
    by_time = json.loads(silt("restore", "web.cli", "--as-of", text, "--yes", "--now", NOW, "--json"))
    assert _without_names(by_time) == {
        **_without_names(api.restore(as_of=text, now=LATER).as_dict()),
        "restored_version": 2,
        "dry_run": False,
    }
    assert _contents(cli) == _contents(api) == _contents(api, as_of_version=2) and _history(cli) == _history(api)

    retried = silt("restore", "web.cli", "--version", "1", "--request-id", "r1")
    assert api.restore(version=1, request_id="r1").message in retried

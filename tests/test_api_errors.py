"""The Python API's types and errors (docs/api.md "Errors" and "Types"): the wheel's py.typed, one exception
hierarchy exported from `siltlake`, a Table as a context manager with its properties and metadata, an update's
unquoted text value refused in a line (no Java trace), and a delete or an update by its predicate alone, in Python
and in the CLI (one resolver of dates and predicate: Table.write_partitions)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.resources
import tomllib
from collections import Counter
from pathlib import Path

import pytest

import siltlake
from siltlake.deployment import Deployment
from siltlake.lake import Lake

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_upsert import KEYED

ROOT = Path(__file__).parent.parent
NEXT_DAY = DAY + dt.timedelta(days=1)
SQLITE_ONLY = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)  # Spark's work is the same on both


def test_the_package_ships_py_typed_for_type_checkers() -> None:
    assert (importlib.resources.files("siltlake") / "py.typed").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["siltlake"], "the wheel carries it (test_release checks the built wheel)"


def test_one_exception_hierarchy_is_exported_from_siltlake() -> None:
    from siltlake.catalog import UpdateConflict, VersionOutOfRange
    from siltlake.catalog import UpdateConflict as PublishUpdateConflict
    from siltlake.merge.parquet_concat import ShallowMergeRefused
    from siltlake.records import UnreadableObject

    exported = {
        "SiltError",
        "RetryableConflict",
        "UpdateConflict",
        "VersionOutOfRange",
        "Refusal",
        "CatalogError",
        "NotFoundError",
        "DefinitionError",
        "ConfigError",
    }
    assert exported <= set(siltlake.__all__)
    for name in exported:
        assert issubclass(getattr(siltlake, name), siltlake.SiltError), name
    # The names existing code catches are the exported classes themselves, not copies.
    assert UpdateConflict is PublishUpdateConflict is siltlake.UpdateConflict
    assert VersionOutOfRange is siltlake.VersionOutOfRange
    assert issubclass(siltlake.UpdateConflict, siltlake.RetryableConflict)
    assert issubclass(siltlake.RetryableConflict, siltlake.CatalogError)
    assert not issubclass(siltlake.VersionOutOfRange, siltlake.RetryableConflict), "a retry reads the same range"
    assert issubclass(UnreadableObject, siltlake.Refusal) and issubclass(ShallowMergeRefused, siltlake.SiltError)
    assert UnreadableObject("cut short").reason == "cut short"


def test_conflicts_and_outages_are_retryable_and_the_cli_exits_75_for_a_conflict() -> None:
    from siltlake.catalog import MergeConflict
    from siltlake.cli.failures import RETRYABLE, USER_ERROR, describe

    for name in ("RetryableError", "MergeConflict", "CatalogUnreachable"):
        assert name in siltlake.__all__ and issubclass(getattr(siltlake, name), siltlake.SiltError), name
    assert MergeConflict is siltlake.MergeConflict
    for retryable in (siltlake.UpdateConflict, siltlake.MergeConflict, siltlake.CatalogUnreachable):
        assert issubclass(retryable, siltlake.RetryableError) and issubclass(retryable, siltlake.CatalogError)
    assert issubclass(siltlake.RetryableConflict, siltlake.RetryableError)
    assert not issubclass(siltlake.CatalogUnreachable, siltlake.RetryableConflict), "an outage, not a conflict"
    for user_error in (siltlake.VersionOutOfRange, siltlake.NotFoundError, siltlake.DefinitionError, siltlake.Refusal):
        assert not issubclass(user_error, siltlake.RetryableError), user_error
    assert RETRYABLE == 75
    conflict = describe(siltlake.UpdateConflict("dt=2026-11-20 changed meanwhile; run the update again"))
    assert (conflict.status, conflict.message) == (75, "dt=2026-11-20 changed meanwhile; run the update again")
    assert describe(siltlake.MergeConflict("ranges moved")).status == RETRYABLE
    assert describe(siltlake.CatalogUnreachable("connection refused")).status == USER_ERROR, "as a driver's outage"
    assert describe(siltlake.NotFoundError("no table web.x")).status == USER_ERROR


def test_a_table_is_a_context_manager_with_its_properties_and_metadata(plain_deployment: Deployment) -> None:
    make_table(plain_deployment, "logs", ttl_days=30)
    make_table(plain_deployment, "users", **KEYED)
    lake = Lake(plain_deployment)
    with lake.table("web.logs") as table:
        assert table.to_arrow().num_rows == 0 and table._plans.by_dates, "a read keeps its plan"
        properties = table.properties
        assert properties["ttl_days"] == 30 and properties["codec"] == "zstd"
        assert properties["time_column"] == "utc_event_time" and "columns" not in properties
        properties["ttl_days"] = 1
        assert table.properties["ttl_days"] == 30, "a copy: set_properties changes the table"
        meta = table.metadata
    assert not table._plans.by_dates, "closed: the kept plans are dropped"
    assert table.to_arrow().num_rows == 0, "a closed table still reads"
    assert (meta.name, meta.version, meta.primary_key, meta.keyed, meta.partition_column) == (
        "web.logs",
        0,
        (),
        False,
        "dt",
    )
    assert [c.name for c in meta.columns] == ["utc_event_time", "user_id", "action"]
    assert meta.columns[1].type == "bigint" and "utc_event_time" in meta.partitioning
    assert meta.created_at.tzinfo is dt.UTC and isinstance(meta, siltlake.TableMetadata)
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.version = 3  # type: ignore[misc]
    users = lake.table("web.users").metadata
    assert users.keyed and users.primary_key == ("user_id",) and users.id != meta.id


@SQLITE_ONLY
def test_an_unquoted_text_value_of_an_update_is_one_clear_error_without_a_java_trace(
    deployment: Deployment, capfd, caplog
) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 0)])
    handle = Lake(deployment).table("web.access")
    capfd.readouterr()
    with pytest.raises(siltlake.SiltError) as refused:
        handle.update({"action": "LOGIN"}, dates=DAY)
    message = str(refused.value)
    assert "SET action = 'LOGIN' reads LOGIN as a column" in message, message
    assert "write {'action': \"'LOGIN'\"}" in message and "nothing was updated" in message, message
    _, err = capfd.readouterr()
    assert "at org.apache" not in err and "Traceback" not in err and "UNRESOLVED_COLUMN" not in err, err[:2000]
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    # Quoted, it is the text; a Python value other than str is a literal.
    handle.update({"action": "'LOGIN'"}, where="user_id < 3", dates=DAY)
    handle.update({"user_id": 99}, where="action = 'LOGIN' AND user_id = 0", dates=DAY)
    actions = Counter(zip(*handle.to_arrow(columns=["user_id", "action"]).to_pydict().values(), strict=True))
    assert actions[(99, "LOGIN")] == 1 and sum(n for (_, a), n in actions.items() if a == "LOGIN") == 3


@SQLITE_ONLY
def test_delete_without_dates_reads_the_days_from_the_predicate(deployment: Deployment) -> None:
    table = make_table(deployment)
    day, next_day = rows_for(DAY, 20, 0), rows_for(NEXT_DAY, 20, 1)
    add_small_objects(deployment, table, DAY, [day])
    add_small_objects(deployment, table, NEXT_DAY, [next_day])
    handle = Lake(deployment).table("web.access")

    def shown() -> Counter:
        rows = handle.to_arrow(columns=["user_id", "dt"]).to_pylist()
        return Counter((r["dt"], r["user_id"]) for r in rows)

    expected = Counter((DAY, r["user_id"]) for r in day) + Counter((NEXT_DAY, r["user_id"]) for r in next_day)
    first = min(r["user_id"] for r in next_day)
    # dt constrains it: only that day's partition is rewritten, and the rest of the predicate is tested there.
    report = handle.delete(f"dt = '{NEXT_DAY}' AND user_id = {first}", now=tokyo(NEXT_DAY, 4))
    assert [p.partition_date for p in report] == [NEXT_DAY]
    expected -= Counter({(NEXT_DAY, first): 1})
    assert shown() == expected
    # No condition on dt: every partition where it may match.
    report = handle.delete("user_id % 2 = 0", now=tokyo(NEXT_DAY, 5))
    assert sorted(p.partition_date for p in report) == [DAY, NEXT_DAY]
    expected = Counter({key: n for key, n in expected.items() if key[1] % 2})
    assert shown() == expected
    # A day range with nothing else deletes those days' rows; dates= still names the partitions.
    handle.delete(f"dt BETWEEN DATE '{DAY}' AND '{DAY}'", now=tokyo(NEXT_DAY, 6))
    assert {d for d, _ in shown()} == {NEXT_DAY}
    handle.delete("true", dates=NEXT_DAY, now=tokyo(NEXT_DAY, 7))
    assert shown() == Counter()
    with pytest.raises(siltlake.SiltError, match="uses dt in a way that does not say which days"):
        handle.delete(f"dt = '{DAY}' OR user_id = 1")


@SQLITE_ONLY
def test_update_without_dates_reads_the_days_from_the_predicate_and_the_cli_resolves_alike(
    deployment: Deployment, monkeypatch
) -> None:
    from .merge_helpers import silt_in_process

    table = make_table(deployment)
    day, next_day = rows_for(DAY, 20, 0), rows_for(NEXT_DAY, 20, 1)
    add_small_objects(deployment, table, DAY, [day])
    add_small_objects(deployment, table, NEXT_DAY, [next_day])
    handle = Lake(deployment).table("web.access")

    def actions() -> Counter:
        rows = handle.to_arrow(columns=["dt", "action"]).to_pylist()
        return Counter((r["dt"], r["action"]) for r in rows)

    report = handle.update({"action": "'seen'"}, where=f"dt = '{NEXT_DAY}' AND user_id % 2 = 0", now=tokyo(NEXT_DAY, 4))
    assert [p.partition_date for p in report] == [NEXT_DAY] and report.rows_changed == (10,)
    assert actions()[(NEXT_DAY, "seen")] == 10 and actions()[(DAY, "seen")] == 0
    assert handle.write_partitions(f"dt >= '{NEXT_DAY}'", None, "update") == ([NEXT_DAY], "true")
    assert handle.write_partitions(None) == ([DAY, NEXT_DAY], None)
    assert handle.write_partitions("user_id = 1", "all") == ([DAY, NEXT_DAY], "user_id = 1")
    # Neither where nor dates: every row of every partition.
    report = handle.update({"action": "'all'"}, now=tokyo(NEXT_DAY, 5))
    assert sorted(p.partition_date for p in report) == [DAY, NEXT_DAY]
    assert actions() == Counter({(DAY, "all"): 20, (NEXT_DAY, "all"): 20})
    with pytest.raises(siltlake.SiltError, match="uses dt in a way that does not say which days.*nothing was updated"):
        handle.update({"action": "'x'"}, where=f"dt = '{DAY}' OR user_id = 1")

    # The CLI: no --date and no --all-dates is the same resolution, for delete and update.
    silt = silt_in_process(deployment, monkeypatch)
    silt("update", "web.access", "--set", "action='cli'", "--where", f"dt = '{DAY}'", "--now", "2026-11-21T20:00:00")
    assert actions() == Counter({(DAY, "cli"): 20, (NEXT_DAY, "all"): 20})
    silt("delete", "web.access", "--where", f"dt = '{NEXT_DAY}' AND user_id % 2 = 1", "--now", "2026-11-21T21:00:00")
    assert actions() == Counter({(DAY, "cli"): 20, (NEXT_DAY, "all"): 10})
    assert "not both" in silt("delete", "web.access", "--where", "true", "--all-dates", "--date", str(DAY), code=2)
    assert "uses dt in a way" in silt("delete", "web.access", "--where", "dt > user_id", code=2)


@SQLITE_ONLY
def test_a_string_and_an_expression_predicate_select_the_same_rows_in_scan_delete_and_update(
    deployment: Deployment,
) -> None:
    import pyarrow.compute as pc

    from siltlake.read.expression_sql import expression_sql

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 0)])
    add_small_objects(deployment, table, NEXT_DAY, [rows_for(NEXT_DAY, 20, 1)])
    handle = Lake(deployment).table("web.access")
    field = pc.field
    expressions = [
        field("action") == "a1",
        (field("user_id") > 5) & (field("dt") == NEXT_DAY),
        ~(field("action") != "a2") | field("user_id").is_null(),
        field("action").isin(["a3", "a4"]) & field("user_id").is_valid(),
        field("utc_event_time") >= dt.datetime.combine(NEXT_DAY, dt.time(3), tzinfo=dt.UTC),
    ]
    for expression in expressions:  # the SQL form selects what the expression does
        sql = expression_sql(expression, "test")
        assert sorted(handle.scan(filter=sql).to_arrow()["user_id"].to_pylist()) == sorted(
            handle.scan(filter=expression).to_arrow()["user_id"].to_pylist()
        ), (expression, sql)

    updated = set(handle.scan(filter=expressions[1]).to_arrow()["user_id"].to_pylist())
    handle.update({"action": "'X'"}, expressions[1], now=tokyo(NEXT_DAY, 4))
    assert set(handle.scan(filter="action = 'X'").to_arrow()["user_id"].to_pylist()) == updated
    before = set(handle.to_arrow()["user_id"].to_pylist())
    deleted = set(handle.scan(filter="action = 'a1'").to_arrow()["user_id"].to_pylist())
    assert deleted
    handle.delete(field("action") == "a1", now=tokyo(NEXT_DAY, 5))
    assert set(handle.to_arrow()["user_id"].to_pylist()) == before - deleted


@SQLITE_ONLY
def test_an_expression_with_no_sql_form_is_refused_before_anything_is_written(deployment: Deployment) -> None:
    import pyarrow.compute as pc

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, 0)])
    handle = Lake(deployment).table("web.access")
    with pytest.raises(siltlake.SiltError, match=r"web.access.delete: the pyarrow expression .* has no SQL form"):
        handle.delete(pc.utf8_length(pc.field("action")) > 1)
    assert handle.to_arrow().num_rows == 5

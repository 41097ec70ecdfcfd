"""DuckDB answers a query only when it gives Spark's answer: the same predicates and aggregates run on both engines
over one table of edge values (int, bigint, float, double, string: 2^24 + 1 on a float, 2^53 + 1, NaN, -0.0,
infinities, the integer extremes), and every query the translation lets through must give Spark's rows.

The generated predicates are checked one by one with the translation (no engine), and those it lets through run
together, one select per engine, as the values of boolean columns (so a null and a false differ). SILTLAKE_FUZZ_EXAMPLES
sets how many lists of predicates (default 12).
"""

from __future__ import annotations

import datetime as dt
import math
import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from siltlake.deployment import Deployment
from siltlake.read import sql as spark_sql
from siltlake.read.duck import faithful, run_plan
from siltlake.read.plan import plan_query
from siltlake.read.translate import NotFaithful
from siltlake.tabledef import TableDef
from siltlake.write.update import prepare_delete

from .conftest import make_config
from .merge_helpers import add_small_objects, silt_in_process
from .test_merge import DAY

pytestmark = pytest.mark.spark
EXAMPLES = int(os.environ.get("SILTLAKE_FUZZ_EXAMPLES", "12"))

INTS = [None, 0, 1, -1, 7, 16777216, 16777217, 2**31 - 1, -(2**31)]
BIGINTS = [None, 0, 3, -5, 16777217, 2**53, 2**53 + 1, 2**62, -(2**62), 2**63 - 1, -(2**63)]
FLOATS = [None, 0.0, -0.0, math.nan, math.inf, -math.inf, 16777216.0, 0.1, 1.5, 3.4e38, 1e-45, -7.0]
DOUBLES = [None, 0.0, -0.0, math.nan, math.inf, 0.1, 0.10000000149011612, 16777217.0, 2.0**53, 1.5, -7.0]
STRINGS = [None, "", "a", "A", "ab", "a_b", "%", "1", "10", "2", " 1", "é", "Ω", "\U0001f600", "a\\b"]
COLUMNS = {"i": INTS, "b": BIGINTS, "f": FLOATS, "d": DOUBLES, "s": STRINGS}
ROWS = 120


# Steps through each column's values, each prime to its list's length: every value comes, paired differently.
STEPS = {"i": 1, "b": 2, "f": 5, "d": 3, "s": 7}


def edge_rows() -> list[dict]:
    """Every value of each column, in rows that pair them differently."""
    start = dt.datetime.combine(DAY, dt.time(1), tzinfo=dt.UTC) - dt.timedelta(hours=9)
    return [
        {
            "utc_event_time": start + dt.timedelta(seconds=n),
            "id": n,
            **{name: values[(n * STEPS[name] + k) % len(values)] for k, (name, values) in enumerate(COLUMNS.items())},
        }
        for n in range(ROWS)
    ]


NUMBERS = {
    "schema": "num",
    "name": "vals",
    "time_column": "utc_event_time",
    "timezone": "Asia/Tokyo",
    "merge_interval": 0,
    "columns": [
        {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
        {"name": "id", "type": "bigint"},
        {"name": "i", "type": "int"},
        {"name": "b", "type": "bigint"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
    ],
}


@pytest.fixture(scope="module")
def lake(tmp_path_factory, spark):
    root = tmp_path_factory.mktemp("engines")
    deployment = Deployment(make_config(root, f"sqlite:///{root / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    record = deployment.catalog.tables.create(TableDef.from_mapping(NUMBERS))
    rows = edge_rows()
    add_small_objects(deployment, record, DAY, [rows[: ROWS // 2], rows[ROWS // 2 :]])
    yield deployment
    deployment.close()


def same(value: object) -> object:
    """A value as compared: NaN equal to itself (Python's nan != nan), -0.0 equal to 0.0 as Python has it."""
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def on_spark(deployment: Deployment, query: str) -> list[tuple] | str:
    """Spark's rows, or its error's first line (ANSI mode errors on an overflow)."""
    try:
        return [tuple(same(v) for v in row) for row in spark_sql(deployment.spark(), query, deployment).collect()]
    except Exception as exc:  # any Spark error is an answer DuckDB must not replace
        return f"error: {str(exc).splitlines()[0]}"


def on_duckdb(deployment: Deployment, query: str) -> list[tuple] | None:
    """DuckDB's rows, or None when the query goes to Spark (before or while running)."""
    plan = plan_query(query, deployment)
    try:
        translation = faithful(plan, deployment)
        rows = run_plan(plan, deployment, translation, 100_000)
    except NotFaithful:
        return None
    return [tuple(same(v) for v in row) for row in rows]


def assert_agree(deployment: Deployment, query: str) -> bool:
    """Whether DuckDB answered; if it did, it gave Spark's rows (in any order)."""
    duck = on_duckdb(deployment, query)
    if duck is None:
        return False
    spark = on_spark(deployment, query)
    assert not isinstance(spark, str), f"{query}: DuckDB answered {duck}, Spark said {spark}"
    assert sorted(duck, key=repr) == sorted(spark, key=repr), query
    return True


# --- the cases found, pinned --------------------------------------------------------------------------------


def test_a_float_column_against_an_integer_compares_as_spark_does(lake) -> None:
    """Spark compares a float with an integer as doubles: 16777217 is no float's value (DuckDB compared as floats,
    where it rounds to 16777216)."""
    for query in [
        "SELECT id FROM num.vals WHERE f = 16777217",
        "SELECT id FROM num.vals WHERE f IN (16777217, 2)",
        "SELECT id FROM num.vals WHERE f BETWEEN 16777217 AND 16777218",
        "SELECT id FROM num.vals WHERE f >= i",
        "SELECT id FROM num.vals WHERE f = b OR b = d",
        "SELECT id FROM num.vals WHERE b BETWEEN 9007199254740993 AND d",
    ]:
        assert assert_agree(lake, query), f"{query}: expected to run on DuckDB"
    assert on_spark(lake, "SELECT count(*) FROM num.vals WHERE f = 16777217") == [(0,)]


def test_a_delete_removes_the_rows_spark_removes_whatever_the_partition_s_size(lake) -> None:
    """The in-process delete (a small partition) and Spark's (bound 0) count the same rows to keep."""
    config = lake.config.publish
    for where in ["f = 16777217", "f IN (16777217)", "f < b", "i = f"]:
        small = prepare_delete(lake, "num.vals", DAY, where, write=False)
        bound, config.in_process_rewrite_bytes = config.in_process_rewrite_bytes, 0
        try:
            large = prepare_delete(lake, "num.vals", DAY, where, write=False)
        finally:
            config.in_process_rewrite_bytes = bound
        assert (small.rows_before, small.rows_after) == (large.rows_before, large.rows_after), where


def test_sums_and_averages_of_integers_give_spark_s_answer_or_go_to_spark(lake) -> None:
    """Spark sums a bigint in a bigint (ANSI mode: an overflow is an error) and averages it through a double sum
    (rounded as it goes past 2^53); DuckDB sums exactly in a HUGEINT. DuckDB answers only where the two agree."""
    answered = [
        query
        for query in [
            "SELECT sum(i), avg(i), sum(b), avg(b) FROM num.vals WHERE b BETWEEN 0 AND 1000000000",
            "SELECT s, sum(i) AS si, avg(i) AS ai FROM num.vals GROUP BY s",
            "SELECT s, count(*) AS n FROM num.vals GROUP BY s HAVING sum(i) > 100 AND avg(i) < 1000000",
        ]
        if assert_agree(lake, query)
    ]
    assert len(answered) == 3
    for query in [
        "SELECT sum(b) FROM num.vals",  # overflows: Spark errors
        "SELECT avg(b) FROM num.vals WHERE b >= 0",  # past 2^53: Spark's double sum rounds
        "SELECT s FROM num.vals GROUP BY s HAVING sum(b) > 0",
    ]:
        assert on_duckdb(lake, query) is None, query
    assert on_spark(lake, "SELECT sum(b) FROM num.vals").startswith("error: [ARITHMETIC_OVERFLOW]")


def test_silt_sql_answers_an_overflowing_sum_as_spark_does(lake, monkeypatch) -> None:
    silt = silt_in_process(lake, monkeypatch)
    output = silt("sql", "SELECT sum(b) FROM num.vals", code=2)
    assert "ARITHMETIC_OVERFLOW" in output
    output = silt("sql", "SELECT avg(b) AS a FROM num.vals WHERE b >= 0", "--format", "csv")
    assert output.splitlines()[-1] == str(on_spark(lake, "SELECT avg(b) FROM num.vals WHERE b >= 0")[0][0])
    output = silt("sql", "SELECT sum(b) FROM num.vals", "--engine", "duckdb", code=2)
    assert "may not give Spark's answer" in output


# --- generated predicates -----------------------------------------------------------------------------------


def _literal(kind: str) -> st.SearchStrategy[str]:
    if kind == "s":
        return st.sampled_from([v for v in STRINGS if v is not None]).map(
            lambda v: "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
        )
    edges = [v for v in (INTS if kind == "i" else BIGINTS) if v is not None and v >= 0]
    return st.one_of(st.sampled_from(edges), st.integers(0, 2**63 - 1), st.integers(0, 40)).map(str) | st.sampled_from(
        ["1.5", "0.1", "16777217.0", "1e3", "NULL", "-1"]
    )


NUMERIC = ["i", "b", "f", "d"]
TALLY = {"generated": 0, "translated": 0}
LIKE_PATTERNS = ["'a%'", "'_'", "'%b'", "'a_b'", "'__'", "'%'"]


@st.composite
def comparison(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from([*NUMERIC, "s"]))
    family = NUMERIC if column in NUMERIC else ["s"]
    other = st.one_of(st.sampled_from(family), _literal("s" if column == "s" else draw(st.sampled_from("ib"))))
    form = draw(st.sampled_from(["op", "op", "op", "in", "between", "null", "like"]))
    if form == "op":
        return f"{column} {draw(st.sampled_from(['=', '<>', '<', '<=', '>', '>=', '<=>']))} {draw(other)}"
    if form == "in":
        listed = ", ".join(draw(st.lists(other, min_size=1, max_size=3)))
        return f"{column} {draw(st.sampled_from(['', 'NOT ']))}IN ({listed})"
    if form == "between":
        return f"{column} BETWEEN {draw(other)} AND {draw(other)}"
    if form == "like":
        return "s LIKE " + draw(st.sampled_from(LIKE_PATTERNS))
    return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"


predicates = st.recursive(
    comparison(),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        inner.map(lambda p: f"NOT ({p})"),
    ),
    max_leaves=3,
)


# Not shrunk: each step would run Spark (the failing list is printed as generated).
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(generated=st.lists(predicates, min_size=15, max_size=15))
def test_generated_predicates_give_spark_s_answer_wherever_duckdb_answers(lake, generated: list[str]) -> None:
    allowed = []
    TALLY["generated"] += len(generated)
    for predicate in generated:
        try:
            faithful(plan_query(f"SELECT id FROM num.vals WHERE {predicate}", lake), lake)
        except NotFaithful:
            continue
        allowed.append(predicate)
    TALLY["translated"] += len(allowed)
    if not allowed:
        return
    query = f"SELECT id, {', '.join(f'{p} AS c{n}' for n, p in enumerate(allowed))} FROM num.vals"
    assert assert_agree(lake, query), query
    assert assert_agree(lake, f"SELECT id FROM num.vals WHERE {allowed[0]}")


def test_the_generated_predicates_mostly_ran_on_duckdb() -> None:
    """The differential test above compared something: a good share of its predicates translated."""
    if not TALLY["generated"]:
        pytest.skip("the differential test did not run")
    assert TALLY["translated"] >= TALLY["generated"] // 4, TALLY

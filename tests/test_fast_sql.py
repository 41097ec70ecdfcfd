"""`silt sql` without Spark: a corpus of log queries runs on DuckDB (over the exact file lists) and on Spark
over the same tables, and the answers (column names and rows) must be equal; what may not translate
faithfully goes to Spark; names, time travel and refusals are checked before any engine starts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections import Counter
from pathlib import Path

import pytest

import siltlake.read.scan
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.publish import publish_once
from siltlake.read import sql as spark_sql
from siltlake.read.duck import faithful, run_plan
from siltlake.read.plan import plan_query
from siltlake.read.sandbox import RefusedSQL
from siltlake.read.translate import NotFaithful
from siltlake.read.version_files import version_files
from siltlake.records.physical import physical_definition
from siltlake.tabledef import Column, TableDef

from .conftest import make_config
from .merge_helpers import add_small_objects
from .test_keyed_read import keyed_table
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark

DAYS = [DAY + dt.timedelta(days=n) for n in range(3)]
ACTIONS = ["login", "logout", "view", "a_b%", "Émile"]
_row_number = iter(range(1_000_000))


def batch(date: dt.date, count: int, added: bool = False) -> list[dict]:
    """Access rows on a Tokyo date: distinct times, some null user ids and actions; `added`: the later columns."""
    rows = []
    for _ in range(count):
        i = next(_row_number)
        row = {
            "utc_event_time": (tokyo(date, 0) + dt.timedelta(seconds=37 * i + 11)).replace(tzinfo=dt.UTC),
            "user_id": None if i % 11 == 0 else i % 7,
            "action": None if i % 13 == 0 else ACTIONS[i % 5],
        }
        if added:
            row.update(status=[200, 404, 500, None][i % 4], latency=None if i % 6 == 0 else (i % 17) / 4)
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def lake(tmp_path_factory, spark):
    """web.access at version 1 (two days), version 2 (two columns added, a third day) and live rows above it;
    web.keyed with a partition holding several rows of some keys (merged on read)."""
    root = tmp_path_factory.mktemp("fastsql")
    deployment = Deployment(make_config(root, f"sqlite:///{root / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    table = make_table(deployment)
    add_small_objects(deployment, table, DAYS[0], [batch(DAYS[0], 60), batch(DAYS[0], 40)])
    add_small_objects(deployment, table, DAYS[1], [batch(DAYS[1], 50)])
    publish_once(deployment)
    first = deployment.catalog.version_reads.table_bounds(table.id)[1]
    deployment.catalog.tables.add_column("web.access", Column(name="status", type="int"))
    table = deployment.catalog.tables.add_column("web.access", Column(name="latency", type="double"))
    add_small_objects(deployment, table, DAYS[0], [batch(DAYS[0], 30, added=True)])
    add_small_objects(deployment, table, DAYS[2], [batch(DAYS[2], 45, added=True)])
    publish_once(deployment)
    add_small_objects(deployment, table, DAYS[1], [batch(DAYS[1], 25, added=True)])  # live, not published
    keyed = deployment.catalog.tables.create(TableDef.from_mapping(keyed_table("keyed").model_dump(by_alias=True)))
    noon = tokyo(DAYS[0], 12).replace(tzinfo=dt.UTC)
    add_small_objects(
        deployment,
        keyed,
        DAYS[0],
        [
            [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 1, "v": f"old{i}"} for i in range(6)],
            [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 2, "v": f"new{i}"} for i in range(0, 6, 2)],
        ],
    )
    yield deployment, first
    deployment.close()


def first_version_time(deployment: Deployment, version: int) -> str:
    rows = [
        v
        for v in deployment.catalog.versions.of_partitions(
            [p.id for p in deployment.catalog.partitions.list(deployment.catalog.tables.get("web.access").id)]
        )
        if v.table_version == version
    ]
    return rows[0].created_at.isoformat(sep=" ")


CORPUS = [
    "SELECT count(*) FROM web.access",
    "SELECT count(*) AS n, count(user_id), count(DISTINCT user_id), count(DISTINCT action) AS actions FROM web.access",
    "SELECT dt, count(*) AS n FROM web.access GROUP BY dt ORDER BY dt",
    "SELECT action, count(*) AS n FROM web.access GROUP BY action ORDER BY n DESC, action",
    "SELECT action, min(utc_event_time) AS first, max(utc_event_time) AS last FROM web.access GROUP BY action",
    "SELECT sum(user_id), avg(user_id), min(user_id), max(user_id) FROM web.access",
    "SELECT hour(utc_event_time) AS h, count(*) AS n FROM web.access GROUP BY hour(utc_event_time) ORDER BY h",
    "SELECT date_trunc('HOUR', utc_event_time), count(*) FROM web.access WHERE dt = '2026-11-21' GROUP BY 1 ORDER BY 1",
    "SELECT to_date(utc_event_time) AS day, dt, count(*) AS n FROM web.access GROUP BY to_date(utc_event_time), dt",
    "SELECT * FROM web.access WHERE user_id = 3 AND action = 'login'",
    "SELECT user_id, action FROM web.access WHERE action LIKE 'log%' ORDER BY user_id, action LIMIT 5",
    "SELECT count(*) FROM web.access WHERE user_id IN (1, 2, 3) OR action IS NULL",
    "SELECT count(*) AS n FROM web.access WHERE user_id BETWEEN 2 AND 4 AND NOT action IS NULL",
    "SELECT count(*) FROM web.access WHERE utc_event_time >= '2026-11-20 18:00:00' "
    "AND utc_event_time < '2026-11-21 01:30'",
    "SELECT dt, count(*) FROM web.access WHERE dt BETWEEN '2026-11-20' AND '2026-11-21' GROUP BY dt",
    "SELECT count(*) FROM web.access WHERE dt IN (DATE '2026-11-22') AND user_id <> 0",
    "SELECT * FROM (SELECT action, utc_event_time, row_number() OVER (PARTITION BY action ORDER BY utc_event_time "
    "DESC) AS rn FROM web.access) WHERE rn <= 2",
    "SELECT action, user_id, rank() OVER (PARTITION BY action ORDER BY user_id) AS r, "
    "dense_rank() OVER (ORDER BY user_id DESC) AS d FROM web.access",
    "WITH c AS (SELECT action, user_id, count(*) AS n FROM web.access GROUP BY action, user_id) "
    "SELECT action, user_id, n FROM (SELECT action, user_id, n, row_number() OVER (PARTITION BY action "
    "ORDER BY n DESC, user_id) AS rn FROM c) ranked WHERE rn = 1",
    "SELECT DISTINCT action FROM web.access",
    "SELECT user_id, count(*) AS n FROM web.access GROUP BY user_id HAVING count(*) > 20 ORDER BY user_id",
    "SELECT status, count(*) AS n, max(latency) AS slowest, min(latency) FROM web.access GROUP BY status",
    "SELECT count(*) FROM web.access VERSION AS OF 1",
    # Version 1 is read as it was, before status was added: its own columns only.
    "SELECT dt, count(*) AS n, count(action) FROM web.access TIMESTAMP AS OF '{v1}' GROUP BY dt",
    "SELECT minute(utc_event_time) AS m, second(utc_event_time) AS s, year(utc_event_time) AS y, "
    "month(utc_event_time) AS mo, day(utc_event_time) AS d FROM web.access WHERE user_id = 5",
    'SELECT `user_id` AS u, a.action FROM web.access a WHERE a.action = "view" ORDER BY u NULLS LAST, a.utc_event_time',
    "SELECT * FROM web.access ORDER BY utc_event_time DESC LIMIT 3",
    "SELECT date_trunc('week', utc_event_time) AS w, date_trunc('day', utc_event_time) AS d, count(*) "
    "FROM web.access GROUP BY 1, 2",
    "SELECT event_id, v, seq FROM web.keyed",
    "SELECT count(*), max(v) FROM web.keyed WHERE seq = 2",
    "SELECT action FROM web.access WHERE latency > 2 AND status = 404 ORDER BY action NULLS FIRST LIMIT 4",
]

NOT_FAITHFUL = [
    "SELECT sum(latency) FROM web.access",  # a floating sum depends on the order of the rows
    "SELECT avg(latency) FROM web.access",
    "SELECT count(*) FROM web.access a JOIN web.access b ON a.user_id = b.user_id",
    "SELECT action FROM web.access UNION SELECT action FROM web.access VERSION AS OF 1",
    "SELECT CASE WHEN user_id > 3 THEN 'hi' END AS c FROM web.access",
    "SELECT user_id + 1 AS u FROM web.access",
    "SELECT count(*) FROM web.access WHERE action LIKE 'a\\_b%'",
    "SELECT count(*) OVER () AS n FROM web.access",
    "SELECT rank() OVER (ORDER BY user_id) FROM web.access",
    "SELECT count(*) FROM web.access WHERE user_id = '3'",
    "SELECT date_format(utc_event_time, 'yyyy') AS y FROM web.access",
    "SELECT count(*) FROM web.access WHERE utc_event_time > '2026-11-20T10:00:00Z'",
    "SELECT user_id AS action FROM web.access ORDER BY action",
    "SELECT action, count(*) AS n FROM web.access GROUP BY action HAVING n > 3",
    "SELECT count(*) FROM web.access WHERE user_id IN (SELECT user_id FROM web.keyed)",
    # No such column in version 1 (added after it): Spark says so.
    "SELECT count(status) FROM web.access VERSION AS OF 1",
]


def both(deployment: Deployment, query: str) -> tuple[tuple, tuple]:
    plan = plan_query(query, deployment)
    translation = faithful(plan, deployment)
    duck = (translation.columns, run_plan(plan, deployment, translation, 100_000))
    frame = spark_sql(deployment.spark(), query, deployment)
    return duck, (frame.columns, [tuple(row) for row in frame.collect()])


def test_the_corpus_gives_spark_s_answers_on_duckdb(lake) -> None:
    deployment, first = lake
    assert first == 1
    v1 = first_version_time(deployment, 1)
    for query in CORPUS:
        query = query.replace("{v1}", v1)
        (duck_names, duck_rows), (spark_names, spark_rows) = both(deployment, query)
        assert duck_names == spark_names, query
        assert spark_rows, query  # every query of the corpus has an answer to compare
        if "ORDER BY" in query.split("FROM")[-1]:
            assert duck_rows == spark_rows, query
        else:
            assert Counter(duck_rows) == Counter(spark_rows), query


def test_what_may_not_translate_faithfully_goes_to_spark(lake) -> None:
    deployment, _ = lake
    for query in NOT_FAITHFUL:
        with pytest.raises(NotFaithful):
            faithful(plan_query(query, deployment), deployment)


def test_names_time_travel_and_refusals_are_checked_before_an_engine(lake) -> None:
    deployment, _ = lake
    for query, message in [
        ("SELECT * FROM web.missing", "no table web.missing"),
        ("SELECT * FROM access", "needs its schema"),
        ("SELECT * FROM web.access@v1", "not an alias"),
        ("SELECT * FROM web.access VERSION AS OF 99", "99"),
        ("SELECT * FROM web.access VERSION AS OF 'x'", "VERSION AS OF takes"),
        ("SELEC 1", "cannot parse"),
        ("SELECT reflect('java.lang.System', 'getenv', 'HOME') FROM web.access", "refuses reflect()"),
        ("SELECT '${env:HOME}' FROM web.access", "refuses ${"),
    ]:
        with pytest.raises(SiltError, match=message.replace("$", "\\$").replace("(", "\\(").replace(")", "\\)")):
            plan_query(query, deployment)
    with pytest.raises(RefusedSQL):
        plan_query("SELECT java_method('java.lang.System', 'getenv', 'HOME') AS x FROM web.access", deployment)


def test_a_where_on_dt_plans_only_those_days(lake) -> None:
    deployment, _ = lake
    plan = plan_query("SELECT count(*) FROM web.access WHERE dt >= '2026-11-21' AND user_id > 1", deployment)
    (read,) = plan.reads.values()
    assert sorted(p.partition_date for p in read.partitions) == DAYS[1:]
    plan = plan_query("SELECT count(*) FROM web.access WHERE dt = '2026-11-21' OR user_id > 1", deployment)
    (read,) = plan.reads.values()
    assert sorted(p.partition_date for p in read.partitions) == DAYS  # an OR bounds nothing


def test_to_duckdb_and_to_polars_read_the_exact_files_and_plan_only_the_days_asked_for(lake, monkeypatch) -> None:
    import duckdb
    import pyarrow.compute as pc

    from siltlake.lake import Lake

    deployment, _ = lake
    for name in ("web.access", "web.keyed"):
        table = Lake(deployment).table(name)
        pinned = [{"as_of_version": 1}] if name == "web.access" else []  # web.keyed has no published version
        for options in (
            {},
            *pinned,
            {"dates": [DAYS[1]]},
            {"filter": pc.field("dt") == DAYS[2]},
            {"filter": pc.field("action" if name == "web.access" else "v") == "view"},
        ):
            expected = Counter(tuple(row.values()) for row in table.to_arrow(**options).to_pylist())
            # Version 1 is read with its own columns, before status and latency were added.
            names = (
                [n for n in table.schema.names if n not in ("status", "latency")]
                if options.get("as_of_version") == 1
                else table.schema.names
            )
            with duckdb.connect() as connection:
                relation = table.to_duckdb(connection, **options)
                assert relation.columns == names
                assert Counter(relation.fetchall()) == expected, (name, options)
            frame = table.to_polars(**options).collect()
            assert Counter(frame.rows()) == expected, (name, options)
    table = Lake(deployment).table("web.access")
    asked = []
    original = siltlake.read.scan.version_files

    def recording(*args, **kwargs):
        files = original(*args, **kwargs)
        asked.append({f.partition_date for f in files})
        return files

    monkeypatch.setattr(siltlake.read.scan, "version_files", recording)
    with duckdb.connect() as connection:
        table.to_duckdb(connection, dates=[DAYS[2]]).fetchall()
        table.to_duckdb(connection, filter=pc.field("dt") >= DAYS[1]).fetchall()
    assert asked == [{DAYS[2]}, {DAYS[1], DAYS[2]}]


def local_paths(deployment: Deployment, uris: list[str]) -> set[str]:
    return {deployment.lake.path(uri.removeprefix(deployment.lake.root + "/")) for uri in uris}


def test_to_duckdb_hands_duckdb_the_exact_file_list_unless_a_partition_is_merged_on_read(lake) -> None:
    import duckdb

    from siltlake.lake import Lake

    deployment, first = lake
    table = Lake(deployment).table("web.access")
    with duckdb.connect() as connection:
        for options, days in (({"dates": [DAYS[0]]}, [DAYS[0]]), ({"as_of_version": first}, DAYS[:2]), ({}, DAYS)):
            relation = table.to_duckdb(connection, **options)
            assert "READ_PARQUET" in relation.explain() and "ARROW" not in relation.explain().upper(), options
            listed = set(re.findall(r"'([^']+\.parquet)'", relation.sql_query()))
            assert listed == local_paths(deployment, table.files(**options)), options
            assert sorted({row[0] for row in relation.select("dt").fetchall()}) == days, options
        keyed = Lake(deployment).table("web.keyed").to_duckdb(connection)
        assert "READ_PARQUET" not in keyed.explain(), "a partition holding several rows of a key is merged first"
        assert sorted(keyed.select("v").fetchall()) == [
            ("new0",),
            ("new2",),
            ("new4",),
            ("old1",),
            ("old3",),
            ("old5",),
        ]


def test_to_duckdb_with_a_view_name_makes_that_view_of_the_version_on_the_connection(lake) -> None:
    import duckdb
    import pyarrow.compute as pc

    from siltlake.lake import Lake

    deployment, first = lake
    table = Lake(deployment).table("web.access")
    with duckdb.connect() as connection:
        for options in ({}, {"as_of_version": first}, {"dates": [DAYS[1]]}, {"filter": pc.field("dt") == DAYS[2]}):
            assert table.to_duckdb(connection, view="access", **options) is connection  # again: replaced
            expected = Counter(table.to_duckdb(connection, **options).fetchall())
            assert Counter(connection.sql("SELECT * FROM access").fetchall()) == expected, options
            # The first version's own columns, before status and latency were added.
            names = (
                [n for n in table.schema.names if n not in ("status", "latency")]
                if options.get("as_of_version") == first
                else table.schema.names
            )
            assert connection.sql("SELECT * FROM access").columns == names, options
        table.to_duckdb(connection, view="access", dates=[DAYS[0]])
        assert "READ_PARQUET" in connection.sql("SELECT count(*) FROM access").explain()
        assert connection.sql("SELECT DISTINCT dt FROM access").fetchall() == [(DAYS[0],)]


def test_to_duckdb_reads_renamed_and_added_columns_of_the_days_asked_for(tmp_path, spark) -> None:
    import duckdb

    from siltlake.lake import Lake

    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    record = make_table(deployment)
    old = batch(DAYS[0], 20)
    add_small_objects(deployment, record, DAYS[0], [old])
    day_two = batch(DAYS[1], 10)
    add_small_objects(deployment, record, DAYS[1], [day_two])
    publish_once(deployment)
    first = deployment.catalog.version_reads.table_bounds(record.id)[1]
    deployment.catalog.tables.rename_column("web.access", "action", "event")
    record = deployment.catalog.tables.add_column("web.access", Column(name="status", type="int"))
    new = [{**row, "status": 200 + n} for n, row in enumerate(batch(DAYS[2], 5))]
    # Written as the stream writes them: the renamed column under the name its objects hold it by ("action").
    add_small_objects(
        deployment, dataclasses.replace(record, definition=physical_definition(record.definition)), DAYS[2], [new]
    )
    publish_once(deployment)
    table = Lake(deployment).table("web.access")
    expected = Counter(
        [
            *((r["utc_event_time"], r["user_id"], r["action"], None, DAYS[0]) for r in old),
            *((r["utc_event_time"], r["user_id"], r["action"], r["status"], DAYS[2]) for r in new),
        ]
    )
    with duckdb.connect() as connection:
        relation = table.to_duckdb(connection, dates=[DAYS[0], DAYS[2]])  # old files and new, one scan
        assert relation.columns == ["utc_event_time", "user_id", "event", "status", "dt"]
        assert "READ_PARQUET" in relation.explain()
        assert Counter(relation.fetchall()) == expected
        # The version before the rename and the add is read as it was: action under its name then,
        # no status.
        before = table.to_duckdb(connection, as_of_version=first, dates=DAYS[1].isoformat())
        assert before.columns == ["utc_event_time", "user_id", "action", "dt"]
        assert before.aggregate("count(*), count(action), min(dt), max(dt)").fetchall() == [
            (10, sum(r["action"] is not None for r in day_two), DAYS[1], DAYS[1])
        ]


def test_to_duckdb_plans_again_only_when_the_days_read_change_and_unions_by_name_only_mixed_files(
    tmp_path, monkeypatch
) -> None:
    """A Table keeps the current state's file list of the days it read while the catalog says they are unchanged
    (a live object, a version); DuckDB reads files of one schema without union_by_name, mixed ones with it."""
    from zoneinfo import ZoneInfo

    import duckdb

    import siltlake.read.scan
    from siltlake.lake import Lake

    today = dt.datetime.now(ZoneInfo("Asia/Tokyo")).date()  # open days: publish closes none of them
    days = [today, today + dt.timedelta(days=1)]
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    record = make_table(deployment)
    add_small_objects(deployment, record, days[0], [batch(days[0], 20), batch(days[0], 10)])
    publish_once(deployment)
    planned = []
    monkeypatch.setattr(
        siltlake.read.scan, "version_files", lambda *a, **k: planned.append(k["dates"]) or version_files(*a, **k)
    )
    table = Lake(deployment).table("web.access")

    def day_one() -> tuple[int, str]:
        with duckdb.connect() as connection:
            relation = table.to_duckdb(connection, dates=[days[0]])
            return relation.aggregate("count(*)").fetchall()[0][0], relation.sql_query().lower()

    assert day_one()[0] == day_one()[0] == 30 and len(planned) == 1
    assert "union_by_name" not in day_one()[1]
    add_small_objects(deployment, record, days[0], [batch(days[0], 5)])  # live, not published
    assert day_one()[0] == 35 and len(planned) == 2
    add_small_objects(deployment, record, days[1], [batch(days[1], 7)])  # another day: the plan stands
    assert day_one()[0] == 35 and len(planned) == 2
    publish_once(deployment)
    assert day_one()[0] == 35 and len(planned) == 3
    record = deployment.catalog.tables.add_column("web.access", Column(name="status", type="int"))
    added = batch(days[0], 4, added=True)
    add_small_objects(deployment, record, days[0], [added])
    table = Lake(deployment).table("web.access")
    count, query = day_one()
    assert count == 39 and "union_by_name" in query
    with duckdb.connect() as connection:
        assert table.to_duckdb(connection, dates=[days[0]]).aggregate("count(status)").fetchall() == [
            (sum(row["status"] is not None for row in added),)
        ]


def write_config_file(config, directory: Path) -> None:  # a siltlake Config
    """The deployment's siltlake.toml in `directory`, for `silt` and Lake.open run there in another process."""
    (directory / "siltlake.toml").write_text(
        f'instance_key = "{config.instance_key}"\n[catalog]\nurl = "{config.catalog.url}"\n'
        f'[storage]\nroot = "{config.storage.root}"\nstaging_root = "{config.storage.staging_root}"\n'
    )


def test_silt_sql_answers_without_importing_pyspark_and_spark_when_asked(lake, tmp_path) -> None:
    import json
    import subprocess
    import sys

    deployment, _ = lake
    write_config_file(deployment.config, tmp_path)

    def silt(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
        script = (
            "import sys, json\nfrom siltlake.cli import main\ntry:\n    main(sys.argv[1:], prog_name='silt')\n"
            "except SystemExit as exc:\n    code = exc.code\nprint(json.dumps(sorted({m.split('.')[0] for m in "
            "sys.modules})), file=sys.stderr)\nsys.exit(code)"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        return result, set(json.loads(result.stderr.strip().splitlines()[-1]))

    result, loaded = silt("sql", "SELECT dt, count(*) AS n FROM web.access GROUP BY dt ORDER BY dt", "--format", "csv")
    assert result.returncode == 0, result.stderr
    from siltlake.lake import Lake

    days = Counter(Lake(deployment).table("web.access").to_arrow(columns=["dt"]).column("dt").to_pylist())
    assert result.stdout.splitlines() == ["dt,n", *(f"{day},{n}" for day, n in sorted(days.items()))]
    assert "pyspark" not in loaded and "py4j" not in loaded and "pyarrow" not in loaded
    for query, message in [("SELECT count(*) FROM web.nope", "no table web.nope"), ("SELEC 1", "cannot parse")]:
        result, loaded = silt("sql", query)
        assert result.returncode == 2 and message in result.stderr and "pyspark" not in loaded
    result, loaded = silt("sql", "--engine", "duckdb", "SELECT sum(latency) AS s FROM web.access")
    assert result.returncode == 2 and "--engine duckdb" in result.stderr and "pyspark" not in loaded
    # Table.to_duckdb on a local lake, in a fresh process: DuckDB reads the files; pyarrow is never imported.
    reader = (
        "import sys, duckdb\nfrom siltlake import Lake\nwith Lake.open('siltlake.toml') as lake:\n"
        "    print(lake.table('web.access').to_duckdb(duckdb.connect(), dates=['2026-11-21'])"
        ".aggregate('count(*)').fetchall()[0][0])\nprint('pyarrow' in sys.modules)"
    )
    import os

    import siltlake

    tree = str(Path(siltlake.__file__).parents[1])  # this checkout's siltlake, whatever the working directory
    result = subprocess.run(
        [sys.executable, "-c", reader],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": tree},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(days[DAYS[1]]), "False"]


# Run as `python -c` with PySpark made unimportable: what an install without the `spark` extra sees.
WITHOUT_SPARK = """
import json, sys
sys.modules["pyspark"] = None
sys.modules["py4j"] = None
mode = sys.argv[1]
if mode == "read":
    from siltlake import Lake
    with Lake.open("siltlake.toml") as lake:
        table = lake.table("web.access")
        arrow_rows = table.to_arrow(columns=["dt"]).num_rows
        import duckdb
        duck_rows = table.to_duckdb(duckdb.connect()).aggregate("count(*)").fetchall()[0][0]
    print(json.dumps({"arrow": arrow_rows, "duckdb": duck_rows}))
else:
    from siltlake.cli import main
    main(sys.argv[2:], prog_name="silt")
"""


def test_tables_read_and_commands_name_the_spark_extra_when_pyspark_is_not_installed(lake, tmp_path) -> None:
    import json
    import subprocess
    import sys

    deployment, _ = lake
    write_config_file(deployment.config, tmp_path)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_SPARK, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )

    from siltlake.lake import Lake

    expected = Lake(deployment).table("web.access").to_arrow(columns=["dt"]).num_rows
    result = run("read")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"arrow": expected, "duckdb": expected}
    result = run("cli", "sql", "SELECT count(*) AS n FROM web.access", "--format", "csv")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["n", str(expected)]
    result = run("cli", "status")
    assert result.returncode == 0, result.stderr
    for command in (["stream", "--once"], ["merge", "--once"], ["run"]):
        result = run("cli", *command)
        assert result.returncode == 2, (command, result.stdout, result.stderr)
        message = " ".join(result.stderr.split())
        assert f"silt {command[0]} runs Spark jobs" in message and "pip install 'siltlake[spark]'" in message
    # A query only Spark can answer says the same instead of failing on an import.
    result = run("cli", "sql", "--engine", "spark", "SELECT count(*) FROM web.access")
    assert result.returncode == 2 and "siltlake[spark]" in " ".join(result.stderr.split()), result.stderr

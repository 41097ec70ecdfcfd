"""A warm Spark session: `silt run`'s session serves Spark Connect (spark.connect), and `silt sql --engine spark`
answers through it without starting a JVM of its own; with no server there it says so and starts Spark itself."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from siltlake.config import Config, ConfigError, SparkConfig, load_config
from siltlake.deployment import Deployment
from siltlake.publish import publish_once
from siltlake.spark import connect_url, start_connect_server, stop_connect_server
from siltlake.tabledef import TableDef

from .conftest import make_config
from .merge_helpers import add_small_objects
from .processes import free_port
from .test_fast_sql import DAYS, batch, write_config_file
from .test_keyed_read import keyed_table
from .test_merge import make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark


def test_spark_connect_binds_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    assert SparkConfig(connect="127.0.0.1:15002").connect_address == ("127.0.0.1", 15002)
    assert SparkConfig(connect="[::1]:15002").connect_address == ("::1", 15002)
    assert SparkConfig(connect="0.0.0.0:15002", connect_remote=True).connect_address == ("0.0.0.0", 15002)
    (tmp_path / "siltlake.toml").write_text('[spark]\nconnect = "0.0.0.0:15002"\n')
    with pytest.raises(ConfigError, match="not a loopback address"):
        load_config(tmp_path / "siltlake.toml")
    with pytest.raises(ConfigError, match="not host:port"):
        load_config(environ={"SILTLAKE_SPARK__CONNECT": "localhost"})
    # A loopback server is named localhost: the client then sends $SPARK_CONNECT_AUTHENTICATE_TOKEN without TLS.
    assert connect_url("127.0.0.1", 15002) == "sc://localhost:15002"
    assert connect_url("10.0.0.5", 15002) == "sc://10.0.0.5:15002"


def test_silt_sql_on_spark_answers_through_the_connect_server(tmp_path: Path, spark) -> None:
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    table = make_table(deployment)
    add_small_objects(deployment, table, DAYS[0], [batch(DAYS[0], 30), batch(DAYS[0], 20)])
    publish_once(deployment)
    add_small_objects(deployment, table, DAYS[1], [batch(DAYS[1], 15)])  # live rows, above the published version
    # A keyed partition with two rows of some keys: merged on read by pyarrow in the server's Python workers.
    keyed = deployment.catalog.tables.create(TableDef.from_mapping(keyed_table("keyed").model_dump(by_alias=True)))
    noon = tokyo(DAYS[0], 12).replace(tzinfo=dt.UTC)
    add_small_objects(deployment, keyed, DAYS[0], [
        [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 1, "v": f"old{i}"} for i in range(6)],
        [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 2, "v": f"new{i}"} for i in range(0, 6, 2)]])
    expected = 30 + 20 + 15
    write_config_file(deployment.config, tmp_path)
    port = free_port()
    with (tmp_path / "siltlake.toml").open("a") as config_file:
        config_file.write(f'[spark]\nconnect = "127.0.0.1:{port}"\n')
    # No Java here: a local session cannot start, so an answer can only come from the server.
    env = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java"), "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    (tmp_path / "java").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "java").chmod(0o755)

    def silt_sql(query: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "siltlake.cli", "sql", "--engine", "spark", query,
                               "--format", "csv"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    start_connect_server(spark, Config.model_validate({"spark": {"connect": f"127.0.0.1:{port}"}}).spark)
    try:
        result = silt_sql("SELECT * FROM (SELECT count(*) AS n, count(DISTINCT dt) AS days FROM web.access) "
                          "CROSS JOIN (SELECT count(*) AS keys, count_if(v LIKE 'new%') AS new FROM web.keyed)")
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["n,days,keys,new", f"{expected},2,6,3"]
        assert "starting Spark here" not in result.stderr
        # The sandbox holds over Connect: a function that is not one of the server's built-ins is refused.
        result = silt_sql("SELECT nosuch_function(action) FROM web.access")
        assert result.returncode != 0
        assert "nosuch_function() it is not a Spark built-in" in " ".join(result.stderr.replace(":", "").split())
        # The gate itself, as a notebook's siltlake.read.sql would meet it with text of its own.
        script = ("import json, sys\nfrom pyspark.sql import SparkSession\n"
                  "from siltlake.read.sandbox import RefusedSQL, check_query\n"
                  "spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()\nverdicts = []\n"
                  "for query in json.loads(sys.argv[2]):\n"
                  "    try:\n        check_query(spark, query)\n        verdicts.append('ok')\n"
                  "    except RefusedSQL as exc:\n        verdicts.append(str(exc))\n"
                  "print(json.dumps(verdicts))\n")
        queries = ["SELECT upper(action), count(*) FROM v GROUP BY 1", "SELECT * FROM parquet.`/etc`",
                   "SELECT TRANSFORM(action) USING 'cat' FROM v", "SELECT db.f(action) FROM v",
                   "SELECT java_method('java.lang.System', 'getenv', 'HOME')", "DROP TABLE v",
                   "SELECT x FROM v; SELECT y FROM v"]
        result = subprocess.run([sys.executable, "-c", script, connect_url("127.0.0.1", port), json.dumps(queries)],
                                env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        verdicts = json.loads(result.stdout.splitlines()[-1])
        assert verdicts[0] == "ok"
        for verdict, expected_words in zip(verdicts[1:], ["names a file path", "TRANSFORM", "not a Spark built-in",
                                                           "java_method()", "only one query", "only one query"],
                                           strict=True):
            assert expected_words in verdict, verdict
    finally:
        stop_connect_server(spark)
        deployment.close()
    # The server gone: said on stderr, then Spark starts here (and cannot: no Java).
    result = silt_sql("SELECT count(*) FROM web.access")
    assert f"no Spark Connect server answers at 127.0.0.1:{port}" in " ".join(result.stderr.split())
    assert result.returncode != 0

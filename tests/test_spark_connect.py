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
from siltlake.errors import SiltError
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
    add_small_objects(
        deployment,
        keyed,
        DAYS[0],
        [
            [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 1, "v": f"old{i}"} for i in range(6)],
            [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 2, "v": f"new{i}"} for i in range(0, 6, 2)],
        ],
    )
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
        return subprocess.run(
            [sys.executable, "-m", "siltlake.cli", "sql", "--engine", "spark", query, "--format", "csv"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    # The token where `silt sql`, run in tmp_path with the default spark.connect_token_file, reads it.
    token_file = tmp_path / ".siltlake" / "spark-connect.token"
    start_connect_server(
        spark,
        Config.model_validate({"spark": {"connect": f"127.0.0.1:{port}", "connect_token_file": str(token_file)}}).spark,
    )
    try:
        result = silt_sql(
            "SELECT * FROM (SELECT count(*) AS n, count(DISTINCT dt) AS days FROM web.access) "
            "CROSS JOIN (SELECT count(*) AS keys, count_if(v LIKE 'new%') AS new FROM web.keyed)"
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines() == ["n,days,keys,new", f"{expected},2,6,3"]
        assert "starting Spark here" not in result.stderr
        # The sandbox holds over Connect: a function that is not one of the server's built-ins is refused.
        result = silt_sql("SELECT nosuch_function(action) FROM web.access")
        assert result.returncode != 0
        assert "nosuch_function() it is not a Spark built-in" in " ".join(result.stderr.replace(":", "").split())
        # The gate itself, as a notebook's siltlake.read.sql would meet it with text of its own.
        script = (
            "import json, sys\nfrom pyspark.sql import SparkSession\n"
            "from siltlake.read.sandbox import RefusedSQL, check_query\n"
            "spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()\nverdicts = []\n"
            "for query in json.loads(sys.argv[2]):\n"
            "    try:\n        check_query(spark, query)\n        verdicts.append('ok')\n"
            "    except RefusedSQL as exc:\n        verdicts.append(str(exc))\n"
            "spark.stop()\nprint(json.dumps(verdicts))\n"
        )
        queries = [
            "SELECT upper(action), count(*) FROM v GROUP BY 1",
            "SELECT * FROM parquet.`/etc`",
            "SELECT TRANSFORM(action) USING 'cat' FROM v",
            "SELECT db.f(action) FROM v",
            "SELECT java_method('java.lang.System', 'getenv', 'HOME')",
            "DROP TABLE v",
            "SELECT x FROM v; SELECT y FROM v",
        ]
        with_token = connect_url("127.0.0.1", port, token_file.read_text().strip())
        result = subprocess.run(
            [sys.executable, "-c", script, with_token, json.dumps(queries)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        verdicts = json.loads(result.stdout.splitlines()[-1])
        assert verdicts[0] == "ok"
        for verdict, expected_words in zip(
            verdicts[1:],
            [
                "names a file path",
                "TRANSFORM",
                "not a Spark built-in",
                "java_method()",
                "only one query",
                "only one query",
            ],
            strict=True,
        ):
            assert expected_words in verdict, verdict
    finally:
        stop_connect_server(spark)
        deployment.close()
    # The server gone: said on stderr, then Spark starts here (and cannot: no Java).
    result = silt_sql("SELECT count(*) FROM web.access")
    assert f"no Spark Connect server answers at 127.0.0.1:{port}" in " ".join(result.stderr.split())
    assert result.returncode != 0


CLIENTS = """
import json, sys
from pyspark.sql import SparkSession
answers = []
for url in json.loads(sys.argv[1]):
    session = None
    try:
        session = SparkSession.builder.remote(url).create()
        answers.append(f"answered {session.range(3).count()}")
    except Exception as exc:
        answers.append("refused" if "UNAUTHENTICATED" in str(exc) else f"failed: {exc}")
    finally:
        # A client left open sends a clean-up call from atexit, which can hang the exit on a refused channel.
        if session is not None:
            session.stop()
print(json.dumps(answers))
"""
SILTLAKE_CLIENT = """
import sys
from siltlake.config import SparkConfig
from siltlake.errors import SiltError
from siltlake.spark import connect_session
try:
    session = connect_session(SparkConfig(connect=sys.argv[1], connect_token_file=sys.argv[2]))
    print(f"answered {session.range(4).count()}")
except SiltError as exc:
    print(exc)
"""


def test_the_connect_server_refuses_clients_without_its_token(tmp_path: Path, spark, monkeypatch) -> None:
    """A token is the default: `silt run`'s server requires one, siltlake's clients read it from the token file
    (mode 0600), and a client without it, or with another, is refused."""
    monkeypatch.delenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", raising=False)
    env = {name: value for name, value in os.environ.items() if name != "SPARK_CONNECT_AUTHENTICATE_TOKEN"}
    port = free_port()
    token_file = tmp_path / "state" / "spark-connect.token"
    config = Config.model_validate(
        {"spark": {"connect": f"127.0.0.1:{port}", "connect_token_file": str(token_file)}}
    ).spark
    url = connect_url("127.0.0.1", port)

    def answers(*urls: str) -> list[str]:
        result = subprocess.run(
            [sys.executable, "-c", CLIENTS, json.dumps(urls)], env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.splitlines()[-1])

    def siltlake_client(**extra: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", SILTLAKE_CLIENT, config.connect, str(token_file)],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip().splitlines()[-1]

    start_connect_server(spark, config)
    try:
        assert answers(url, f"{url}/;token={'x' * 43}") == ["refused", "refused"]
        assert oct(token_file.stat().st_mode & 0o777) == oct(0o600)
        token = token_file.read_text().strip()
        assert len(token) >= 40
        assert answers(f"{url}/;token={token}") == ["answered 3"]
        assert siltlake_client() == "answered 4"
        refused = siltlake_client(SPARK_CONNECT_AUTHENTICATE_TOKEN="y" * 43)
        assert "refused this client's token" in refused and "SPARK_CONNECT_AUTHENTICATE_TOKEN" in refused
    finally:
        stop_connect_server(spark)
    # The operator's own token, from the environment (the systemd unit's siltlake.env), is the one required.
    monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", "operator-chosen-token-0123")
    start_connect_server(spark, config)
    try:
        assert token_file.read_text().strip() == "operator-chosen-token-0123"
        assert answers(url, f"{url}/;token=operator-chosen-token-0123") == ["refused", "answered 3"]
    finally:
        stop_connect_server(spark)
    monkeypatch.setenv("SPARK_CONNECT_AUTHENTICATE_TOKEN", "a;token=with-separators")
    with pytest.raises(SiltError, match="SPARK_CONNECT_AUTHENTICATE_TOKEN must be 16 or more letters"):
        start_connect_server(spark, config)

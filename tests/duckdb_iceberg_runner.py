"""DuckDB with its iceberg extension, for the reader matrix (tests/test_iceberg_readers.py).

DuckDB's iceberg, avro and httpfs extensions install from the package registry as wheels built for one DuckDB
release (1.5.x), not for the 2.x the project resolves, so that DuckDB lives in its own venv (`make test` makes
.venv-readers from tests/readers-requirements.txt). The test process runs this file with that venv's Python:
`run_queries` is its side, `main` the venv's. It imports only the standard library at the top, so both can
load it.

The request (JSON on stdin): `setup`, statements run first (an ATTACH), and `queries`, each run on its own;
each answer is written as an Arrow IPC file `<out>/<i>.arrow`, and an error is answered as its message, so a
query DuckDB refuses is a finding, not a lost batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
READERS_VENV = REPO / ".venv-readers"
READERS_PYTHON = Path(os.environ.get("SILTLAKE_READERS_PYTHON", READERS_VENV / "bin" / "python"))
# Loaded in this order: iceberg reads its manifests through avro; httpfs serves ATTACH's REST requests.
EXTENSIONS = ("httpfs", "avro", "iceberg")


def readers_venv_missing() -> str | None:
    """Why the readers venv cannot run DuckDB's iceberg extension, or None when it can."""
    if "SILTLAKE_READERS_PYTHON" in os.environ:
        return None if READERS_PYTHON.exists() else f"no {READERS_PYTHON} (SILTLAKE_READERS_PYTHON)"
    if not (READERS_VENV / ".installed").exists():
        return f"no {READERS_VENV} (`make readers-venv`, part of `make test`, installs tests/readers-requirements.txt)"
    return None


def run_queries(queries: list[str], setup: tuple[str, ...] = (), timeout: float = 300) -> list[Any]:
    """Each query's answer from DuckDB in the readers venv: a pyarrow Table, or the error message (a str)."""
    import pyarrow as pa

    with tempfile.TemporaryDirectory(prefix="duckdb-answers-") as out:
        request = json.dumps({"setup": list(setup), "queries": queries, "out": out})
        done = subprocess.run(
            [str(READERS_PYTHON), __file__], input=request, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"DuckDB runner exited {done.returncode}: {done.stderr.strip()[-2000:]}")
        errors = json.loads(done.stdout)["errors"]
        answers: list[Any] = []
        for i in range(len(queries)):
            if str(i) in errors:
                answers.append(errors[str(i)])
            else:
                with pa.OSFile(f"{out}/{i}.arrow", "rb") as source:
                    answers.append(pa.ipc.open_file(source).read_all())
        return answers


def connect() -> Any:
    """A DuckDB connection with the extensions loaded from their wheels' files (nothing is downloaded)."""
    import importlib

    import duckdb

    connection = duckdb.connect(config={"autoinstall_known_extensions": False})
    for name in EXTENSIONS:
        package = Path(importlib.import_module(f"duckdb_extension_{name}").__file__).parent
        (path,) = package.glob(f"extensions/v{duckdb.__version__}/{name}.duckdb_extension")
        connection.execute(f"LOAD '{path}'")
    connection.execute("SET TimeZone = 'UTC'")  # timestamps without a zone in a query are UTC, as siltlake's
    return connection


def main() -> None:
    import pyarrow as pa

    request = json.load(sys.stdin)
    connection = connect()
    for statement in request["setup"]:
        connection.execute(statement)
    errors = {}
    for i, query in enumerate(request["queries"]):
        try:
            answer = connection.sql(query).to_arrow_table()
        except Exception as exc:  # every DuckDB error is an answer to report
            errors[str(i)] = f"{type(exc).__name__}: {exc}"
            continue
        with pa.OSFile(f"{request['out']}/{i}.arrow", "wb") as sink, pa.ipc.new_file(sink, answer.schema) as writer:
            writer.write_table(answer)
    json.dump({"errors": errors}, sys.stdout)


if __name__ == "__main__":
    main()

"""Hostile input for the load task: generated CSV, JSON lines and MessagePack files, whole or corrupted.

The contract (docs/design.md, "Hostile input"), as tests/test_fuzz_parsers.py checks it for staging
objects: a load task reports ok with records_in = loaded + bad records, each bad record in the error file
naming its line and a reason, or it fails with a reason. Nothing else escapes, nothing hangs. The
generators of corrupt bytes are tests/test_fuzz_parsers_corrupt.py's, the example settings
(SILTLAKE_FUZZ_EXAMPLES) tests/test_fuzz_parsers.py's.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from siltlake.load.config import parse_load_config
from siltlake.load.task import LoadTask, run_load_task
from siltlake.storage.filesystem import Storage

from .test_fuzz_parsers import EXAMPLES, deep_json, fuzz, packed
from .test_fuzz_parsers_corrupt import MUTATIONS, mutate

# A parser that loops fails here instead of stalling CI; each example takes well under 0.5 s.
pytestmark = pytest.mark.timeout(120 + EXAMPLES // 2)

# --- Load: the per-file task ----------------------------------------------------------------------

LOAD_COLUMNS = json.dumps(
    [
        {"name": "time", "type": "timestamp", "nullable": False, "source": None},
        {"name": "n", "type": "bigint", "nullable": True, "source": None},
        {"name": "name", "type": "string", "nullable": True, "source": None},
    ]
)
LOAD_PARSERS = {
    "csv": {
        "type": "csv",
        "columns": [
            {"name": "time", "type": "timestamp"},
            {"name": "n", "type": "long"},
            {"name": "name", "type": "string"},
        ],
    },
    "jsonl": {"type": "jsonl"},
    "msgpack": {"type": "msgpack"},
}
LOAD_TIME = "2026-11-20T01:00:00Z"


def load_file(tmp_path: Path, name: str, data: bytes, parser: str, exact: bool = False) -> dict:
    """One load task over one file with error type file; returns its report plus the error file's entries."""
    path = tmp_path / name
    path.write_bytes(data)
    errors = tmp_path / f"{name}.errors.jsonl"
    decoder = {"line_filter": [{"regex": "^never$", "skip": True}]} if exact else {}
    config = parse_load_config(
        {
            "in": {"path": str(path)},
            "parser": LOAD_PARSERS[parser],
            "decoder": decoder,
            "out": {"table": "web.x"},
            "error": {"type": "file", "path": str(tmp_path)},
        }
    )
    (job,) = config.jobs.values()
    report = run_load_task(
        LoadTask(
            job="main",
            index=0,
            uri=path.as_uri(),
            job_json=job.model_dump_json(by_alias=True, exclude_unset=True),
            columns_json=LOAD_COLUMNS,
            time_column="time",
            timezone="UTC",
            codec="zstd",
            run_id=name,
            lake=Storage(str(tmp_path / "lake")),
            instance_key="fuzz",
            error_uri=errors.as_uri(),
            batch_rows=5,
            spill_bytes=1 << 20,
        )
    )
    report["errors"] = [json.loads(line) for line in errors.read_text().splitlines()] if errors.exists() else []
    if report["status"] == "ok":
        loaded = [pq.read_table(str(tmp_path / "lake" / part["tmp_key"])) for part in report["parts"]]
        report["loaded_n"] = [n for table in loaded for n in table.column("n").to_pylist()]  # a flip may null n
    return report


LOAD_RECORDS = {
    "good": lambda n: ({"time": LOAD_TIME, "n": n, "name": "a"}, "good"),
    "unicode": lambda n: ({"time": LOAD_TIME, "n": n, "name": "ﬁ\u202e\u0000"}, "good"),
    "comma-quote-newline": lambda n: ({"time": LOAD_TIME, "n": n, "name": 'a,"b"\nc'}, "good"),
    "no-time": lambda n: ({"n": n, "name": "a"}, "bad"),
    "bad-time": lambda n: ({"time": "yesterday", "n": n, "name": "a"}, "bad"),
    "wrong-type": lambda n: ({"time": LOAD_TIME, "n": f"x{n}", "name": "a"}, "bad"),
}


def encode_load(parser: str, rows: list[dict]) -> bytes:
    if parser == "jsonl":
        return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()
    if parser == "msgpack":
        return b"".join(packed(row) for row in rows)
    lines = []
    for row in rows:
        name = row.get("name", "")
        quoted = '"' + name.replace('"', '""') + '"' if set(name) & set(',"\n') else name
        lines.append(f"{row.get('time', '')},{row.get('n', '')},{quoted}")
    return ("time,n,name\n" + "\n".join(lines) + "\n").encode()


@fuzz
@given(
    st.sampled_from(["csv", "csv-exact", "jsonl", "msgpack"]),
    st.lists(st.sampled_from(sorted(LOAD_RECORDS)), min_size=1, max_size=25),
    st.booleans(),
)
def test_load_tasks_account_for_every_record(
    tmp_path_factory: pytest.TempPathFactory, parser: str, kinds: list[str], compress: bool
) -> None:
    rows, verdicts = [], {}
    for n, kind in enumerate(kinds, start=1):
        row, verdict = LOAD_RECORDS[kind](n)
        rows.append(row)
        verdicts[n] = verdict
    kind = parser.removesuffix("-exact")
    data = encode_load(kind, rows)
    report = load_file(
        tmp_path_factory.mktemp("load"),
        f"in.{kind}" + (".gz" if compress else ""),
        gzip.compress(data) if compress else data,
        kind,
        exact=parser.endswith("-exact"),
    )
    assert report["status"] == "ok", report.get("reason")
    assert report["records_in"] == len(rows) == report["loaded"] + report["bad_records"]
    assert sorted(report["loaded_n"]) == [n for n, v in verdicts.items() if v == "good"]
    assert len(report["errors"]) == report["bad_records"]
    assert all(entry["line"] >= 1 and entry["reason"] and "raw" in entry for entry in report["errors"])


# pyarrow's CSV reader fails to hand a non-UTF-8 ragged row to the invalid-row callback and reports that
# as unraisable; the task then fails with the row named, which is what this test accepts.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@fuzz
@given(
    st.sampled_from(["csv", "jsonl", "msgpack"]),
    st.integers(1, 60),
    st.booleans(),
    st.lists(MUTATIONS, min_size=1, max_size=3),
)
def test_corrupted_load_files_are_ok_and_consistent_or_fail_with_a_reason(
    tmp_path_factory: pytest.TempPathFactory, parser: str, count: int, compress: bool, mutations: list[tuple]
) -> None:
    data = encode_load(parser, [{"time": LOAD_TIME, "n": n, "name": f"n{n}"} for n in range(count)])
    data = gzip.compress(data) if compress else data
    for mutation in mutations:
        data = mutate(data, mutation)
    report = load_file(tmp_path_factory.mktemp("load"), f"in.{parser}", data, parser)
    if report["status"] == "ok":
        assert (
            report["records_in"]
            == report["loaded"] + report["bad_records"]
            == len(report["loaded_n"]) + len(report["errors"])
        )
        event("load ok")
    else:
        assert report["status"] == "failed" and report["reason"]
        assert not report["reason"].startswith(("RecursionError", "AttributeError", "TypeError", "KeyError"))
        event(f"load failed: {report['reason'].split(':')[0]}")


def test_load_msgpack_truncated_or_garbled_fails_naming_the_byte(tmp_path: Path) -> None:
    whole = b"".join(packed({"time": LOAD_TIME, "n": n}) for n in range(5))
    truncated = load_file(tmp_path, "t.msgpack", whole[:-3], "msgpack")
    assert truncated["status"] == "failed"
    assert "truncated MessagePack stream: the item at byte" in truncated["reason"]
    garbled = load_file(tmp_path, "g.msgpack", whole + b"\xc1", "msgpack")
    assert garbled["status"] == "failed" and f"not valid MessagePack at byte {len(whole)}" in garbled["reason"]


def test_load_deep_json_is_a_bad_record_and_invalid_utf8_names_its_line(tmp_path: Path) -> None:
    good = json.dumps({"time": LOAD_TIME, "n": 1}) + "\n"
    deep = load_file(tmp_path, "d.jsonl", (good + deep_json(5000) + "\n" + good).encode(), "jsonl")
    assert deep["status"] == "ok" and (deep["loaded"], deep["bad_records"]) == (2, 1)
    assert deep["errors"][0]["line"] == 2 and "nested too deeply" in deep["errors"][0]["reason"]
    latin = load_file(tmp_path, "l.jsonl", good.encode() * 3 + b'{"n": "caf\xe9"}\n', "jsonl")
    assert latin["status"] == "failed" and "invalid UTF-8 at line 4" in latin["reason"]

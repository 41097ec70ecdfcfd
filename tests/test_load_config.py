"""Load config validation (every error names its key path) and guess on varied samples; no Spark."""

from __future__ import annotations

import bz2
import gzip
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from siltlake.cli import main
from siltlake.errors import ConfigError
from siltlake.load.config import SqlFilter, parse_load_config
from siltlake.load.guess import guess, guess_csv

CSV_PARSER = {"type": "csv", "columns": [{"name": "id", "type": "long"}, {"name": "time", "type": "timestamp"}]}


def job(**changes: object) -> dict:
    base = {"in": {"path": "data/*.csv"}, "parser": CSV_PARSER, "out": {"table": "web.access"}}
    base.update(changes)
    return base


def test_a_minimal_job_and_its_defaults() -> None:
    config = parse_load_config(job())
    (only,) = config.jobs.values()
    assert only.decoder.compression == "auto" and only.error.type == "skip"
    assert only.parser.delimiter == "," and only.parser.header is True


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (job(extra=1), "extra: unknown key"),
        (job(**{"in": {"path": "x", "glob": "y"}}), "in.glob: unknown key"),
        (job(**{"in": {"path": " "}}), "in.path: must name a file"),
        (job(decoder={"compression": "lz4"}), "decoder.compression: Input should be 'auto'"),
        (job(decoder={"line_filter": [{"regex": "("}]}), "decoder.line_filter.0.regex: invalid regular expression"),
        (job(decoder={"line_filter": [{"regex": "^#"}]}), "decoder.line_filter.0: give either replace"),
        (job(decoder={"line_filter": [{"regex": "^#", "skip": True, "replace": ""}]}), "give either replace"),
        (job(parser={**CSV_PARSER, "delimiter": ";;"}), "parser.delimiter: must be one character"),
        (job(parser={**CSV_PARSER, "skip_header_lines": -1}), "parser.skip_header_lines: Input should be greater"),
        (job(parser={"type": "xml"}), "parser.type: Input should be 'csv', 'jsonl' or 'msgpack'"),
        (job(parser={"type": "csv"}), "parser: a csv parser needs columns"),
        (job(parser={"type": "jsonl", "delimiter": ","}), "parser: delimiter apply to the csv parser only"),
        (job(parser={"type": "csv", "columns": [{"name": "id", "type": "int"}]}), "parser.columns.0.type"),
        (job(parser={"type": "csv", "columns": [{"name": "Id", "type": "long"}]}), "parser.columns.0.name"),
        (
            job(parser={"type": "csv", "columns": [{"name": "a", "type": "long"}, {"name": "a", "type": "long"}]}),
            "parser: duplicate column names: a",
        ),
        (
            job(parser={"type": "csv", "columns": [{"name": "a", "type": "long", "format": "%Y"}]}),
            "parser.columns.0: format and zone apply to timestamp columns only",
        ),
        (
            job(parser={"type": "csv", "columns": [{"name": "t", "type": "timestamp", "zone": "Mars/Base"}]}),
            "parser.columns.0.zone: 'Mars/Base' is not an IANA time zone",
        ),
        (job(filters={"x": {"type": "explode"}}), "filters.x: Input tag 'explode' found"),
        (job(filters={"x": {"type": "drop"}}), "filters.x.drop.columns: Field required"),
        (job(filters={"x": {"type": "rename", "columns": {"a": "B c"}}}), "filters.x.rename.columns"),
        (job(filters={"x": {"type": "sql", "query": " "}}), "filters.x.sql.query: the sql filter needs a query"),
        (
            job(filters={"s": {"type": "sql", "query": "select * from in"}, "d": {"type": "drop", "columns": ["a"]}}),
            "filters.s: the sql filter must be the last filter",
        ),
        (job(filters={"a": {"type": "add", "column": "x", "value": [1]}}), "filters.a.add.value"),
        (job(out={"table": "access"}), "out.table: 'access' is not schema.table"),
        (job(out={"table": "web.Access"}), "out.table: name 'Access' is not a valid identifier"),
        (job(out={"table": "web.access", "create": True}), "out: create: true needs time_column"),
        (job(out={"table": "web.access", "timezone": "Nowhere"}), "out.timezone: 'Nowhere' is not an IANA"),
        (job(out={}), "out.table: Field required"),
        (job(error={"type": "file"}), "error: type file needs path"),
        (job(error={"type": "skip", "path": "/tmp"}), "error: type file needs path; skip and abort take none"),
        (job(error={"type": "warn"}), "error.type: Input should be 'skip', 'abort' or 'file'"),
        ({"jobs": {"a": job()}, "extra": {}}, "extra: unknown key (next to jobs:, put it under default:)"),
        ({"jobs": {}}, "jobs: must map job names"),
        ({"jobs": {"a": 3}}, "jobs.a: must be a mapping"),
        ({"jobs": {"Bad-Name": job()}}, "job name 'Bad-Name' is not a valid identifier"),
        ({"default": job(), "jobs": {"a": {"parser": {"delimiter": "||"}}}}, "jobs.a.parser.delimiter: must be one"),
        ([1, 2], "the top level must be a mapping"),
    ],
)
def test_config_errors_name_the_key(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_load_config(data)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_jobs_merge_the_default_and_override_filters_by_name() -> None:
    config = parse_load_config(
        {
            "default": {
                **job(),
                "filters": {
                    "secrets": {"type": "drop", "columns": ["password"]},
                    "tag": {"type": "add", "column": "source", "value": "import"},
                },
            },
            "jobs": {
                "users": {
                    "in": {"path": "users.csv"},
                    "out": {"table": "app.users"},
                    "filters": {"secrets": {"type": "drop", "columns": ["password", "token"]}},
                },
                "histories": {
                    "in": {"path": "histories.csv"},
                    "out": {"table": "app.histories"},
                    "filters": {"tag": None, "sql": {"type": "sql", "query": "select * from in"}},
                },
            },
        }
    )
    users, histories = config.jobs["users"], config.jobs["histories"]
    assert users.input.path == "users.csv" and users.parser.columns == config.jobs["histories"].parser.columns
    assert list(users.filters) == ["secrets", "tag"] and users.filters["secrets"].columns == ("password", "token")
    assert list(histories.filters) == ["secrets", "sql"] and isinstance(histories.filters["sql"], SqlFilter)
    assert histories.sql == "select * from in" and users.sql is None
    assert config.digest() != parse_load_config(job()).digest()


# --- guess -------------------------------------------------------------------------------------


def columns(parser: dict) -> list[tuple]:
    return [(c["name"], c["type"], c.get("format"), c.get("zone")) for c in parser["columns"]]


def test_guess_quoted_newlines_header_nulls_and_empty_strings() -> None:
    parser = guess_csv(
        "id,Event Time,comment,score,ok\n"
        '1,2026-11-20 10:00:00,"two\nlines, with comma",1.5,true\n'
        "2,2026-11-20 11:00:00,,\\N,false\n"
        '3,2026-11-20 12:00:00,"say ""hi""",-2,TRUE\n',
        "Asia/Tokyo",
    )
    assert parser["delimiter"] == "," and parser["quote"] == '"' and parser["escape"] is None
    assert parser["header"] is True and parser["skip_header_lines"] == 0
    assert parser["null_string"] == "\\N"  # empty comment stays an empty string; \N is null
    assert columns(parser) == [
        ("id", "long", None, None),
        ("event_time", "timestamp", "%Y-%m-%d %H:%M:%S", "Asia/Tokyo"),
        ("comment", "string", None, None),
        ("score", "double", None, None),
        ("ok", "boolean", None, None),
    ]


def test_guess_semicolons_without_header_after_a_preamble() -> None:
    parser = guess_csv(
        "# exported 2026-11-21\n# by tool v2\n1;20/Nov/2026:10:00:00 +0900;x\n2;21/Nov/2026:10:00:00 +0900;y\n", "UTC"
    )
    assert parser["delimiter"] == ";" and parser["header"] is False and parser["skip_header_lines"] == 2
    assert parser["null_string"] is None
    assert columns(parser) == [
        ("c0", "long", None, None),
        ("c1", "timestamp", "%d/%b/%Y:%H:%M:%S %z", None),
        ("c2", "string", None, None),
    ]


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["2026-11-20T10:00:00Z", "2026-11-21T00:00:01+09:00"], ("timestamp", "%Y-%m-%dT%H:%M:%S%z")),
        (["2026-11-20 10:00:00.123", "2026-11-21 00:00:01.5"], ("timestamp", "%Y-%m-%d %H:%M:%S.%f")),
        (["2026/11/20 10:00:00", "2026/11/21 00:00:01"], ("timestamp", "%Y/%m/%d %H:%M:%S")),
        (["11/20/2026 10:00:00", "12/31/2026 23:59:59"], ("timestamp", "%m/%d/%Y %H:%M:%S")),
        (["2026-11-20T10:00:00Z", "2026-11-20T10:00:00.25+09:00"], ("timestamp", None)),
        (["2026-11-20 10:00", "tomorrow"], ("string", None)),
        (["12", "-3"], ("long", None)),
        (["1e3", "2"], ("double", None)),
    ],
)
def test_guess_column_types_and_timestamp_formats(values: list[str], expected: tuple) -> None:
    parser = guess_csv("v\tw\n" + "".join(f"{v}\tx\n" for v in values), "UTC")
    assert parser["delimiter"] == "\t" and parser["header"] is True
    kind = parser["columns"][0]
    assert (kind["type"], kind.get("format")) == expected


def test_guess_escape_character() -> None:
    parser = guess_csv('a,b\n"x \\"quoted\\" y",1\n"z",2\n', "UTC")
    assert parser["escape"] == "\\"
    assert [c["type"] for c in parser["columns"]] == ["string", "long"]


def test_guess_writes_a_config_that_loads(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    sample = b"user,time,n\nann,2026-11-20 10:00:00,1\nbob,2026-11-20 11:00:00,2\n"
    (data / "a.csv.gz").write_bytes(gzip.compress(sample))
    (data / "b.jsonl.bz2").write_bytes(bz2.compress(b'{"t": "2026-11-20T10:00:00Z", "v": 1.5, "tags": ["a"]}\n'))
    seed = tmp_path / "seed.yml"
    seed.write_text(yaml.safe_dump({"in": {"path": str(data / "*.csv.gz")}, "out": {"table": "web.users"}}))
    result = CliRunner().invoke(main, ["guess", str(seed), "-o", str(tmp_path / "config.yml")])
    assert result.exit_code == 0, result.output
    written = yaml.safe_load((tmp_path / "config.yml").read_text())
    assert list(written) == ["in", "decoder", "parser", "out"]
    assert written["decoder"] == {"compression": "gzip"} and written["out"]["time_column"] == "time"
    assert columns(written["parser"])[0] == ("user", "string", None, None)
    parse_load_config(written)

    jsonl = guess({"in": {"path": str(data / "b.jsonl.bz2")}, "out": {"table": "web.events"}})
    assert jsonl["decoder"] == {"compression": "bzip2"} and jsonl["parser"]["type"] == "jsonl"
    assert columns(jsonl["parser"]) == [
        ("t", "timestamp", "%Y-%m-%dT%H:%M:%S%z", None),
        ("v", "double", None, None),
        ("tags", "json", None, None),
    ]
    assert jsonl["out"]["time_column"] == "t"
    parse_load_config(json.loads(json.dumps(jsonl)))


def test_guess_refuses_a_seed_without_inputs(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no files match"):
        guess({"in": {"path": str(tmp_path / "*.csv")}, "out": {"table": "web.x"}})
    with pytest.raises(ConfigError, match="out.table is required"):
        (tmp_path / "x.csv").write_text("a,b\n1,2\n")
        guess({"in": {"path": str(tmp_path / "x.csv")}})


@pytest.mark.parametrize("split", [1, 2, 3, 7, 10, 11, 64, 1000])
def test_splits_cover_every_line_exactly_once(tmp_path: Path, split: int) -> None:
    from siltlake.load.task import open_source, records

    lines = ["id,name"] + [f"{i},{'x' * (i % 7)}" for i in range(40)]
    path = tmp_path / "a.csv"
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    config = parse_load_config(
        {
            "in": {"path": str(path)},
            "out": {"table": "web.x"},
            "parser": {
                "type": "csv",
                "skip_header_lines": 0,
                "columns": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
            },
        }
    )
    (job,) = config.jobs.values()
    seen = []
    for offset in range(0, size, split):
        with open_source(path.as_uri(), "none", offset, min(split, size - offset)) as source:
            seen += [record["id"] for _, record, _, _ in records(source, job, at_start=offset == 0)]
    assert seen == [str(i) for i in range(40)]


def test_the_vectorised_csv_path_agrees_with_the_per_record_path(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from siltlake.load.task import LoadTask, run_load_task
    from siltlake.storage.filesystem import Storage

    rows = [
        "id,time,n,f,ok,name,small",
        "1,2026-03-08 01:30:00, 12 ,1.5,true,a,1",
        "2,2026-03-08 02:30:00,+7,-0.0, TRUE ,,2",  # 02:30 does not exist in New York that day
        "3,2026-11-01 01:30:00,1.0,1e3,yes,c,3",  # ambiguous time; 1.0 is not a bigint; yes is no boolean
        "4,2026-02-30 10:00:00,99999999999999999999,inf,false,d,4",  # no such date; bigint overflow; inf
        "5,2026-11-20 10:00:00,,,,\\N,5",  # empties are null; \\N is null
        "6,2026-11-20 10:00:00.5,5,2,false,f,5",  # a fraction the format does not take
        "7,20261120,5,2,false,g,2147483648",  # int overflow too
        "8,2026-11-20 10:00:00,5",  # too few fields
        '9,2026-11-20 10:00:00,5,2,false,"multi\nline",7',
        "10,2026-11-01 01:30:00,-3,.5,False,j,-8",  # ambiguous: the earlier instant (EDT)
    ]
    path = tmp_path / "a.csv"
    path.write_text("\n".join(rows) + "\n")
    parser = {
        "type": "csv",
        "null_string": "\\N",
        "columns": [
            {"name": "id", "type": "long"},
            {"name": "time", "type": "timestamp", "format": "%Y-%m-%d %H:%M:%S", "zone": "America/New_York"},
            {"name": "n", "type": "long"},
            {"name": "f", "type": "double"},
            {"name": "ok", "type": "boolean"},
            {"name": "name", "type": "string"},
            {"name": "small", "type": "long"},
        ],
    }
    columns = [
        {"name": "id", "type": "bigint", "nullable": True, "source": None},
        {"name": "time", "type": "timestamp", "nullable": False, "source": None},
        {"name": "n", "type": "bigint", "nullable": True, "source": None},
        {"name": "f", "type": "double", "nullable": True, "source": None},
        {"name": "ok", "type": "boolean", "nullable": True, "source": None},
        {"name": "name", "type": "string", "nullable": True, "source": None},
        {"name": "small", "type": "int", "nullable": True, "source": None},
    ]
    results = []
    for run, decoder in (("fast", {}), ("exact", {"line_filter": [{"regex": "^never$", "skip": True}]})):
        config = parse_load_config(
            {"in": {"path": str(path)}, "decoder": decoder, "parser": parser, "out": {"table": "web.x"}}
        )
        (job,) = config.jobs.values()
        report = run_load_task(
            LoadTask(
                job="main",
                index=0,
                uri=path.as_uri(),
                job_json=job.model_dump_json(by_alias=True, exclude_unset=True),
                columns_json=json.dumps(columns),
                time_column="time",
                timezone="UTC",
                codec="zstd",
                run_id=run,
                lake=Storage(str(tmp_path / "lake")),
                instance_key="k",
                error_uri=None,
                batch_rows=4,
                spill_bytes=1 << 20,
            )
        )
        assert report["status"] == "ok", (report.get("reason"), report.get("traceback"))
        table = (
            pq.read_table([str(tmp_path / "lake" / part["tmp_key"]) for part in report["parts"]])
            .sort_by("id")
            .to_pylist()
        )
        results.append((report["records_in"], report["bad_records"], table))
    assert results[0] == results[1]
    records_in, bad, table = results[0]
    assert (records_in, bad) == (10, 5)
    assert [row["id"] for row in table] == [1, 2, 5, 9, 10]
    assert table[1]["n"] == 7 and table[1]["f"] == 0.0 and table[1]["ok"] is True
    assert table[2]["name"] is None and table[2]["n"] is None
    assert table[3]["name"] == "multi\nline" and table[4]["f"] == 0.5 and table[4]["small"] == -8
    assert str(table[0]["time"]) == "2026-03-08 06:30:00+00:00"
    assert str(table[4]["time"]) == "2026-11-01 05:30:00+00:00"
    assert str(table[1]["time"]) == "2026-03-08 07:30:00+00:00"  # Python's reading of a time in the gap


def test_msgpack_zstd_and_bzip2_json_lines_tasks(tmp_path: Path) -> None:
    import msgpack
    import pyarrow as pa
    import pyarrow.parquet as pq

    from siltlake.load.task import LoadTask, run_load_task
    from siltlake.storage.filesystem import Storage

    records = [{"time": f"2026-11-20T0{i}:00:00Z", "n": i} for i in range(5)] + [{"n": 9}]
    packed = b"".join(msgpack.packb(r) for r in records)
    with pa.CompressedOutputStream(str(tmp_path / "a.msgpack.zst"), "zstd") as sink:
        sink.write(packed)
    (tmp_path / "b.jsonl.bz2").write_bytes(bz2.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    columns = json.dumps(
        [
            {"name": "time", "type": "timestamp", "nullable": False, "source": None},
            {"name": "n", "type": "bigint", "nullable": True, "source": None},
        ]
    )
    for name, kind in (("a.msgpack.zst", "msgpack"), ("b.jsonl.bz2", "jsonl")):
        config = parse_load_config(
            {"in": {"path": str(tmp_path / name)}, "parser": {"type": kind}, "out": {"table": "web.x"}}
        )
        (job,) = config.jobs.values()
        report = run_load_task(
            LoadTask(
                job="main",
                index=0,
                uri=(tmp_path / name).as_uri(),
                job_json=job.model_dump_json(by_alias=True, exclude_unset=True),
                columns_json=columns,
                time_column="time",
                timezone="UTC",
                codec="zstd",
                run_id=kind,
                lake=Storage(str(tmp_path / "lake")),
                instance_key="k",
                error_uri=None,
                batch_rows=100,
                spill_bytes=1 << 20,
            )
        )
        assert report["status"] == "ok", report.get("reason")
        assert (report["records_in"], report["loaded"], report["bad_records"]) == (6, 5, 1)
        assert "missing event time" in report["bad_samples"][0]
        (part,) = report["parts"]
        assert pq.read_table(str(tmp_path / "lake" / part["tmp_key"])).column("n").to_pylist() == [0, 1, 2, 3, 4]


def test_guess_fills_each_job_of_a_default_and_jobs_seed(tmp_path: Path) -> None:
    (tmp_path / "users.csv").write_text("id,name,signup\n1,ann,2026-11-20 10:00:00\n2,bob,2026-11-21 11:00:00\n")
    (tmp_path / "histories.tsv").write_text(
        "user\tat\tamount\n1\t2026-11-20T10:00:00Z\t1.5\n2\t2026-11-20T11:00:00Z\t2\n"
    )
    seed = {
        "default": {"out": {"create": True, "timezone": "Asia/Tokyo"}},
        "jobs": {
            "users": {"in": {"path": str(tmp_path / "users.csv")}, "out": {"table": "app.users"}},
            "histories": {"in": {"path": str(tmp_path / "histories.tsv")}, "out": {"table": "app.h"}},
        },
    }
    config = parse_load_config(guess(seed))
    users, histories = config.jobs["users"], config.jobs["histories"]
    assert users.out.time_column == "signup" and users.out.timezone == "Asia/Tokyo"
    assert [c.type for c in users.parser.columns] == ["long", "string", "timestamp"]
    assert histories.parser.delimiter == "\t" and histories.out.time_column == "at"
    assert [c.type for c in histories.parser.columns] == ["long", "timestamp", "double"]

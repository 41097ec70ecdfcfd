"""Hostile names: identifiers, table files, CLI arguments, staging keys and object keys that try path
traversal or SQL injection are refused with a one-line error naming the value; nothing lands outside
the roots, and the catalog (both kinds) is left as it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from siltlake.config import Config
from siltlake.defbase import check_identifier
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError, DefinitionError
from siltlake.load.config import parse_load_config
from siltlake.storage.filesystem import Storage, UnsafeKey
from siltlake.stream.discover import discover, map_key
from siltlake.stream.task import StreamTask, process_staging_object
from siltlake.tabledef import TableDef, load_table_file

from .conftest import ACCESS_TABLE, make_config
from .test_cli import TABLE_TOML, silt  # noqa: F401 - the `silt` fixture: the CLI against a fresh deployment

HOSTILE_NAMES = [
    "../etc",
    "..",
    ".",
    "/abs",
    "a/b",
    "%2e%2e",
    "%2e%2e%2fetc",
    "a\\b",
    "a\0b",
    "access\n",
    "\naccess",
    "access ",
    "Access",
    "ａｃｃｅｓｓ",  # fullwidth letters: NFKC folds them to "access"
    "\u0430ccess",  # Cyrillic a
    "ﬁle",  # the fi ligature: NFKC makes it "file"
    "caf\u00e9",
    "cafe\u0301",
    "a\u200bb",
    "x" * 64,
    "",
    "1abc",
    "a.b",
    "a-b",
    "a b",
    "x'; DROP TABLE tables; --",
    'x"; DROP TABLE tables; --',
    "x;--",
    "x`y",
    "x) OR (1=1",
    "tables--",
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
@pytest.mark.parametrize("what", ["schema name", "table name", "column name"])
def test_identifiers_refuse_traversal_injection_and_look_alikes(name: str, what: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        check_identifier(name, what)
    assert str(caught.value).startswith(f"{what} {name!r} is not a valid identifier")
    assert "\n" not in str(caught.value)


def test_the_longest_valid_identifier_still_passes() -> None:
    assert check_identifier("a" * 63, "table name") == "a" * 63
    assert check_identifier("_x9", "column name") == "_x9"


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for the BMP)."""
    return json.dumps(value)


@pytest.mark.parametrize("field", ["schema", "name", "column"])
@pytest.mark.parametrize("name", ["../../evil", "access\n", "x'; DROP TABLE tables; --", "ａｃｃｅｓｓ", "a\0b"])
def test_table_definition_files_with_hostile_names_are_refused(tmp_path: Path, field: str, name: str) -> None:
    text = TABLE_TOML
    if field == "column":
        text = text.replace('name = "user_id"', f"name = {toml_string(name)}")
    else:
        text = text.replace(
            f'{field} = "{"web" if field == "schema" else "access"}"', f"{field} = {toml_string(name)}", 1
        )
    assert text != TABLE_TOML
    path = tmp_path / "hostile.toml"
    path.write_text(text)
    with pytest.raises(DefinitionError) as caught:
        load_table_file(path)
    message = str(caught.value)
    assert str(path) in message and repr(name) in message and "\n" not in message


def tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.fixture
def wide_console(monkeypatch) -> None:  # pytest's monkeypatch
    """Rich wraps at 80 columns under the test runner; an error must read as one line."""
    from siltlake.cli import output

    monkeypatch.setattr(output.console, "width", 1000)


def error_line(output: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    return line


HOSTILE_TABLE_NAMES = [
    "../../etc.passwd",
    "web.access/../../x",
    "/tmp.x",
    "web.%2e%2e",
    "web.access\n",
    "web.ａｃｃｅｓｓ",
    "web.access'; DROP TABLE tables; --",
    'web."access"',
    "web.access;--",
    "web.a\\b",
    "web.\u0430ccess",
]


def test_table_commands_refuse_hostile_names_on_both_catalogs(silt, wide_console, tmp_path: Path) -> None:  # noqa: F811
    silt("init")
    silt("table", "create", "access.toml")
    before = tree(tmp_path)
    for name in HOSTILE_TABLE_NAMES:
        for command in (
            ["table", "show", name],
            ["table", "drop", name, "--yes"],
            ["table", "rename", "web.access", name],
            ["table", "rename", name, "web.other"],
            ["table", "add-column", name, "c", "string"],
            ["errors", "list", name],
            ["history", name],
        ):
            line = error_line(silt(*command, code=2).output)
            # The whole argument, or the part of schema.table that is not an identifier, as repr shows it.
            assert any(repr(part) in line for part in [name, *name.split(".")] if part), (command, line)
    for column in HOSTILE_NAMES:
        if "\0" in column:
            continue  # an operating system argument cannot hold NUL
        for command in (
            ["table", "add-column", "web.access", column, "string"],
            ["table", "alter-column", "web.access", column, "bigint"],
        ):
            line = error_line(silt(*command, code=2).output)
            assert repr(column) in line, (command, line)
    # The catalog is intact (no statement ran the text), and nothing was written anywhere.
    listing = silt("table", "list").output
    assert "web.access" in listing and "web.other" not in listing
    assert tree(tmp_path) == before
    assert not list(tmp_path.parent.glob("etc*")) and not Path("/tmp.x").exists()


@pytest.mark.parametrize("name", ["../../evil", "x'; DROP TABLE tables; --", "access\n"])
def test_table_create_from_a_hostile_file_creates_nothing(
    silt,  # noqa: F811
    wide_console,
    tmp_path: Path,
    name: str,
) -> None:
    silt("init")
    (tmp_path / "hostile.toml").write_text(TABLE_TOML.replace('name = "access"', f"name = {toml_string(name)}"))
    before = tree(tmp_path)
    line = error_line(silt("table", "create", "hostile.toml", code=2).output)
    assert "hostile.toml" in line and repr(name) in line
    assert "no tables yet" in silt("table", "list").output
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ({"out": {"table": "web.x'; DROP TABLE tables; --"}}, "not a valid identifier"),
        ({"out": {"table": "../web.x"}}, "'../web.x' is not schema.table"),
        ({"out": {"table": "web.x\n"}}, "not a valid identifier"),
        ({"filters": {"r": {"type": "rename", "columns": {"id": "id; DROP TABLE t"}}}}, "not a valid identifier"),
        ({"filters": {"a": {"type": "add", "column": "x' OR '1", "value": 1}}}, "not a valid identifier"),
    ],
)
def test_load_configs_refuse_hostile_identifiers(text: dict, message: str) -> None:
    base = {
        "in": {"path": "data/*.csv"},
        "out": {"table": "web.access"},
        "parser": {"type": "csv", "columns": [{"name": "id", "type": "long"}, {"name": "t", "type": "timestamp"}]},
    }
    with pytest.raises(ConfigError, match=message) as caught:
        parse_load_config({**base, **text})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("job", ["../evil", "x;DROP TABLE t", "Jobs"])
def test_load_job_names_are_identifiers(job: str) -> None:
    config = {"jobs": {job: {"in": {"path": "a.csv"}, "out": {"table": "web.x"}, "parser": {"type": "jsonl"}}}}
    with pytest.raises(ConfigError, match=re.escape(repr(job))):
        parse_load_config(config)


# --- Staging keys -------------------------------------------------------------------------------

UNSAFE_KEYS = [
    "../f.web.access/2026/11/20/a.jsonl",
    "/f.web.access/2026/11/20/a.jsonl",
    "f.web.access/2026/11/20/../../../../a.jsonl",
    "f.web.access/./2026/11/20/a.jsonl",
    "f.web.access//2026/11/20/a.jsonl",
    "f.web.access/2026/11/20/%2e%2e%2f%2e%2e%2fa.jsonl",
    "f.web.access/2026/11/20/%2E%2E/a.jsonl",
    "f.web.access/2026/11/20/a\\..\\b.jsonl",
    "f.web.access/2026/11/20/a\0.jsonl",
    "f.web.access/2026/11/20/a\n.jsonl",
]
UNMAPPED_KEYS = {
    "f.web.ａｃｃｅｓｓ/2026/11/20/a.jsonl": "not a valid table name",
    "f.web.\u0430ccess/2026/11/20/a.jsonl": "not a valid table name",
    "f.web.access';DROP TABLE tables;--/2026/11/20/a.jsonl": "not a valid table name",
    "f.web.access--/2026/11/20/a.jsonl": "not a valid table name",
    "f.web.Access/2026/11/20/a.jsonl": "not a valid table name",
    "a.jsonl": "does not match",
    f"f.web.{'a' * 64}/2026/11/20/a.jsonl": "not a valid table name",
}


def tables_by_name(deployment: Deployment) -> dict:
    return deployment.catalog.tables.by_key_names()


@pytest.mark.parametrize("key", UNSAFE_KEYS)
def test_unsafe_staging_keys_map_to_no_table(key: str) -> None:
    from siltlake.streamconfig import DEFAULT_KEY_PATTERN

    mapping = map_key(key, re.compile(DEFAULT_KEY_PATTERN), {})
    assert mapping.table is None and mapping.reason.startswith(f"unsafe key {key!r}")


@pytest.fixture
def lake(tmp_path: Path, catalog_url: str) -> Deployment:
    """A deployment without Spark: discovery and object tasks need none."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    yield deployment
    deployment.close()


def record(user_id: int) -> bytes:
    return json.dumps({"time": "2026-11-20T01:00:00Z", "user_id": user_id, "action": "v"}).encode() + b"\n"


def test_hostile_staging_objects_are_recorded_unknown_and_never_read(lake: Deployment, tmp_path: Path) -> None:
    staging = Path(lake.staging.path(""))
    decoy = tmp_path / "secret.jsonl"  # what a traversal out of the staging root would reach
    decoy.write_bytes(record(666))
    on_disk = [
        key
        for key in [*UNSAFE_KEYS, *UNMAPPED_KEYS]
        if "\0" not in key
        and ".." not in key.split("/")
        and not key.startswith("/")
        and "//" not in key
        and "/./" not in key
    ]
    for key in on_disk:
        path = staging / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(record(1))
    safe = "f.web.access/2026/11/20/ok.jsonl"
    (staging / safe).write_bytes(record(2))

    found = discover(lake)

    assert (found.listed, found.registered, found.unknown) == (len(on_disk) + 1, 1, len(on_disk))
    unknown = {u.uri: u.reason for u in lake.catalog.staging.unknown()}
    for key in on_disk:
        reason = unknown[lake.staging.uri(key)]
        expected = "unsafe key" if key in UNSAFE_KEYS else UNMAPPED_KEYS[key]
        assert expected in reason, (key, reason)
    (pending,) = lake.catalog.staging.pending(10)
    assert pending.uri == lake.staging.uri(safe)
    assert not (tmp_path / "lake").exists() or not list((tmp_path / "lake").rglob("*.parquet"))


def test_symbolic_links_out_of_the_staging_root_are_recorded_unknown(lake: Deployment, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_bytes(record(666))
    day = Path(lake.staging.path("f.web.access/2026/11/20"))
    day.mkdir(parents=True)
    (day / "link.jsonl").symlink_to(outside / "secret.jsonl")
    (day / "dir").symlink_to(outside, target_is_directory=True)
    (day / "ok.jsonl").write_bytes(record(1))
    (day / "inside.jsonl").symlink_to(day / "ok.jsonl")  # a link that stays inside is an ordinary object

    found = discover(lake)

    assert (found.registered, found.unknown) == (2, 2)
    unknown = {u.uri.rsplit("/", 1)[-1]: u.reason for u in lake.catalog.staging.unknown()}
    assert set(unknown) == {"link.jsonl", "secret.jsonl"}
    assert all("symbolic link that leads out of the staging root" in reason for reason in unknown.values())
    assert "'f.web.access/2026/11/20/dir/secret.jsonl'" in unknown["secret.jsonl"]


def stream_task(deployment: Deployment, uri: str) -> StreamTask:
    table = deployment.catalog.tables.get("web.access")
    return StreamTask(
        staging_object_id=1,
        uri=uri,
        staging=deployment.staging,
        lake=deployment.lake,
        layout=table.layout(deployment.instance_key),
        table_json=table.definition.to_json(),
        run_id="hostile",
        batch_rows=1000,
        spill_bytes=1 << 20,
    )


ESCAPE = "%2e%2e%2f" * 5 + "secret.jsonl"  # decoded: five levels up, out of the staging root to the decoy


sqlite_only = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)  # no catalog question here


@sqlite_only
@pytest.mark.parametrize("name", [ESCAPE, "a b#c?d.jsonl", "caf\u00e9 日本.jsonl", "100%.jsonl", "x%41.jsonl"])
def test_object_uris_encode_their_keys_so_they_open_the_object_itself(
    lake: Deployment, tmp_path: Path, name: str
) -> None:
    key = f"f.web.access/2026/11/20/{name}"
    assert pafs.FileSystem.from_uri(lake.staging.uri(key))[1] == lake.staging.path(key)
    (tmp_path / "secret.jsonl").write_bytes(record(666))
    path = Path(lake.staging.path(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(record(7))
    result = process_staging_object(stream_task(lake, lake.staging.uri(key)))
    assert result["status"] == "ok" and result["records_in"] == 1
    (part,) = result["parts"]
    assert pq.read_table(lake.lake.path(part["tmp_key"])).column("user_id").to_pylist() == [7]  # not the decoy


@sqlite_only
def test_a_stored_uri_that_decodes_to_dot_dot_is_refused_not_read(lake: Deployment, tmp_path: Path) -> None:
    (tmp_path / "secret.jsonl").write_bytes(record(666))
    uri = lake.staging.uri("f.web.access/2026/11/20") + "/" + ESCAPE
    result = process_staging_object(stream_task(lake, uri))
    assert result["status"] == "unknown" and "'..' segments" in result["reason"] and uri in result["reason"]


# --- Object keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["../outside.txt", "a/../../outside.txt", "/tmp/outside.txt", "a/b/../../../x", "a\0b", ".."]
)
def test_storage_refuses_keys_that_leave_its_root(tmp_path: Path, key: str) -> None:
    storage = Storage(str(tmp_path / "root"))
    storage.ensure_root()
    for operation in (
        lambda: storage.write_bytes(key, b"x"),
        lambda: storage.read_bytes(key),
        lambda: storage.delete(key),
        lambda: storage.move("a", key),
        lambda: storage.exists(key),
        lambda: storage.open_output(key),
    ):
        with pytest.raises(UnsafeKey) as caught:
            operation()
        assert repr(key) in str(caught.value) and "\n" not in str(caught.value)
    assert {p.name for p in tmp_path.iterdir()} == {"root"} and not list((tmp_path / "root").iterdir())
    assert not Path("/tmp/outside.txt").exists()


def test_keys_with_dots_inside_names_are_still_fine(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "root"))
    storage.write_bytes("a/..b/c..d/...", b"x")
    assert storage.read_bytes("a/..b/c..d/...") == b"x"


def test_instance_keys_refuse_a_trailing_newline() -> None:
    with pytest.raises(ValueError, match="instance_key"):
        Config.model_validate({"instance_key": "test0001\n"})
    assert Config.model_validate({"instance_key": "test0001"}).instance_key == "test0001"


# --- delete --where: a predicate, parsed alone ---------------------------------------------------


@pytest.mark.spark
@sqlite_only
def test_delete_where_is_parsed_alone_so_it_cannot_break_out(deployment: Deployment, monkeypatch, wide_console) -> None:
    from .merge_helpers import add_small_objects, rows_for, silt_in_process
    from .test_merge import DAY, make_table

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 0)])
    run = silt_in_process(deployment, monkeypatch)
    partitions = deployment.catalog.partitions.list(table.id)
    for where in [
        "user_id = 3) OR (true",
        "true), false) OR (true",
        "1=1; DROP TABLE tables; --",
        "user_id = 3; DELETE FROM tables",
    ]:
        line = error_line(run("delete", "web.access", "--where", where, "--date", DAY.isoformat(), code=2))
        assert line.startswith(f"error: cannot use --where {where!r} on web.access")
    assert deployment.catalog.partitions.list(table.id) == partitions  # no update version, nothing deleted
    assert "web.access" in run("table", "list")

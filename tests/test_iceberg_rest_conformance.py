"""`silt iceberg serve` against the Iceberg REST catalog spec (apache/iceberg open-api/rest-catalog-open-api.yaml) and
PyIceberg's RestCatalog, on SQLite and PostgreSQL catalogs, with real sockets on 127.0.0.1.

PyIceberg's client reads through every endpoint a read-only catalog serves and sees exactly what the SQL catalog
holds; raw requests check each endpoint's status and body shape, the writes' refusal (403 ForbiddenException, and
the config's `endpoints` without them, so clients refuse before sending), and that a write PyIceberg refused after
writing its files leaves nothing once reap's grace period has passed.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pytest

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import lake_key, open_catalog
from siltlake.publish.iceberg.rest import SERVED, IcebergRestServer
from siltlake.publish.iceberg.snapshots import snapshot_of_version
from siltlake.reap import reap_once

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

IDENT = ("web", "access")
TABLES = ("access", "clicks", "errors")
NEXT_DAY = DAY + dt.timedelta(days=1)
SEP = "%1F"  # the spec's namespace separator, url-encoded


@pytest.fixture
def served(tmp_path: Path, catalog_url: str) -> Iterator[tuple[Deployment, IcebergRestServer]]:
    """Three tables of schema web, web.access with two published versions, and a nested namespace web.archive
    (made in the Iceberg catalog itself: siltlake's namespaces have one level), served on a free port."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.config.publish.targets = ["iceberg"]
    deployment.init()
    record = make_table(deployment)
    for name in TABLES[1:]:
        make_table(deployment, name)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0)])
    assert not publish_once(deployment, now=tokyo(DAY, 12)).target_errors
    add_small_objects(deployment, record, NEXT_DAY, [rows_for(NEXT_DAY, 10, 1)])
    assert not publish_once(deployment, now=tokyo(NEXT_DAY, 12)).target_errors
    open_catalog(deployment).create_namespace(("web", "archive"), {"owner": "ops"})
    server = IcebergRestServer(deployment, "127.0.0.1", 0).start()
    try:
        yield deployment, server
    finally:
        server.close()
        deployment.close()


def request(
    server: IcebergRestServer,
    method: str,
    path: str,
    body: Any = None,  # any JSON
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], Any]:
    """(status, headers, the JSON body or None) of one raw request."""
    data = json.dumps(body).encode() if body is not None else None
    sent = urllib.request.Request(
        server.url + path, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(sent, timeout=10) as answer:
            status, got, raw = answer.status, dict(answer.headers), answer.read()
    except urllib.error.HTTPError as failed:
        status, got, raw = failed.code, dict(failed.headers), failed.read()
    return status, got, json.loads(raw) if raw else None


def assert_error(answer: tuple[int, dict[str, str], Any], code: int, kind: str) -> str:
    """The answer is the spec's IcebergErrorResponse: {"error": ErrorModel} and nothing else; returns its message."""
    status, _, body = answer
    assert status == code, answer
    assert set(body) == {"error"} and set(body["error"]) >= {"message", "type", "code"}, body
    assert body["error"]["type"] == kind and body["error"]["code"] == code and body["error"]["message"], body
    return body["error"]["message"]


def rows(table: pa.Table) -> Counter:
    return Counter(zip(*(table.column(c).to_pylist() for c in ("user_id", "action", "dt")), strict=True))


def test_pyiceberg_reads_through_every_served_endpoint_what_the_sql_catalog_holds(served) -> None:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    deployment, server = served
    sql = open_catalog(deployment)
    rest = RestCatalog("siltlake", uri=server.url)
    assert rest.list_namespaces() == [("web",)]
    assert rest.list_namespaces("web") == [("web", "archive")], "the spec: the children of parent"
    assert rest.list_namespaces(("web", "archive")) == []
    with pytest.raises(NoSuchNamespaceError):
        rest.list_namespaces("nothing")
    assert rest.namespace_exists("web") and rest.namespace_exists(("web", "archive"))
    assert not rest.namespace_exists("nothing")
    assert rest.load_namespace_properties(("web", "archive")) == sql.load_namespace_properties(("web", "archive"))
    assert rest.load_namespace_properties(("web", "archive"))["owner"] == "ops"
    with pytest.raises(NoSuchNamespaceError):
        rest.load_namespace_properties("nothing")
    assert rest.list_tables("web") == [("web", name) for name in TABLES]
    assert rest.list_tables(("web", "archive")) == []
    with pytest.raises(NoSuchNamespaceError):
        rest.list_tables("nothing")
    assert rest.table_exists(IDENT) and not rest.table_exists(("web", "nothing"))
    assert not rest.table_exists(("nothing", "access"))
    with pytest.raises(NoSuchTableError):
        rest.load_table(("web", "nothing"))
    table = rest.load_table(IDENT)
    here = sql.load_table(IDENT)
    assert table.metadata_location == here.metadata_location
    assert [s.snapshot_id for s in table.snapshots()] == [s.snapshot_id for s in here.snapshots()]
    lake_table = Lake(deployment).table("web.access")
    for version in (lake_table.version - 1, lake_table.version):
        snapshot = snapshot_of_version(table, version)
        assert rows(table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == rows(
            lake_table.to_arrow(as_of_version=version)
        )
    paged = RestCatalog("siltlake-paged", uri=server.url, **{"rest-page-size": "1"})
    assert paged.list_tables("web") == rest.list_tables("web")
    assert paged.list_namespaces("web") == [("web", "archive")]


def test_the_config_lists_exactly_the_served_endpoints_and_clients_refuse_the_rest(served) -> None:
    from pyiceberg.catalog.rest import Capability, Endpoint, RestCatalog

    deployment, server = served
    status, _, config = request(server, "GET", "/v1/config")
    assert status == 200 and config["defaults"] == {} and config["overrides"] == {}
    served_endpoints = {Endpoint.from_string(e) for e in config["endpoints"]}
    assert served_endpoints == {Endpoint.from_string(e) for e in SERVED}
    for capability in (
        "V1_LIST_NAMESPACES",
        "V1_LOAD_NAMESPACE",
        "V1_NAMESPACE_EXISTS",
        "V1_LIST_TABLES",
        "V1_LOAD_TABLE",
        "V1_TABLE_EXISTS",
    ):
        assert getattr(Capability, capability) in served_endpoints, capability
    for write in ("V1_CREATE_NAMESPACE", "V1_UPDATE_TABLE", "V1_CREATE_TABLE", "V1_DELETE_TABLE"):
        assert getattr(Capability, write) not in served_endpoints, write
    rest = RestCatalog("siltlake", uri=server.url)
    before = open_catalog(deployment).load_table(IDENT).metadata_location
    with pytest.raises(NotImplementedError):
        rest.create_namespace("other")
    with pytest.raises(NotImplementedError):
        rest.drop_table(IDENT)
    with pytest.raises(NotImplementedError):
        rest.load_table(IDENT).append(rest.load_table(IDENT).scan().to_arrow().slice(0, 2))
    assert rest.list_namespaces() == [("web",)], "nothing was created"
    assert open_catalog(deployment).load_table(IDENT).metadata_location == before, "nothing was committed"


def test_raw_namespace_endpoints(served) -> None:
    _, server = served
    status, _, body = request(server, "GET", "/v1/namespaces")
    assert status == 200 and body["namespaces"] == [["web"]] and body.get("next-page-token") is None
    assert request(server, "GET", "/v1/namespaces?parent=web")[2]["namespaces"] == [["web", "archive"]]
    assert request(server, "GET", f"/v1/namespaces?parent=web{SEP}archive")[2]["namespaces"] == []
    assert request(server, "GET", "/v1/namespaces?parent=")[2]["namespaces"] == [["web"]], "empty is absent"
    assert_error(request(server, "GET", "/v1/namespaces?parent=nothing"), 404, "NoSuchNamespaceException")
    status, _, body = request(server, "GET", f"/v1/namespaces/web{SEP}archive")
    assert status == 200 and body["namespace"] == ["web", "archive"] and body["properties"]["owner"] == "ops"
    assert request(server, "GET", "/v1/namespaces/web")[2]["namespace"] == ["web"]
    assert_error(request(server, "GET", "/v1/namespaces/nothing"), 404, "NoSuchNamespaceException")
    assert request(server, "HEAD", "/v1/namespaces/web")[0] == 204
    assert request(server, "HEAD", f"/v1/namespaces/web{SEP}archive")[0] == 204
    assert request(server, "HEAD", "/v1/namespaces/nothing")[0] == 404


def test_raw_table_listing_pages_when_asked(served) -> None:
    _, server = served
    status, _, body = request(server, "GET", "/v1/namespaces/web/tables")
    assert status == 200 and body.get("next-page-token") is None
    assert body["identifiers"] == [{"namespace": ["web"], "name": name} for name in TABLES]
    names, token, pages = [], "", 0
    while token is not None:
        status, _, body = request(server, "GET", f"/v1/namespaces/web/tables?pageToken={quote(token)}&pageSize=2")
        assert status == 200 and len(body["identifiers"]) <= 2
        names += [i["name"] for i in body["identifiers"]]
        token, pages = body["next-page-token"], pages + 1
    assert names == list(TABLES) and pages == 2
    status, _, body = request(server, "GET", "/v1/namespaces?pageToken=&pageSize=1")
    assert body == {"namespaces": [["web"]], "next-page-token": None}
    assert request(server, "GET", "/v1/namespaces/web/tables?pageSize=1")[2]["next-page-token"] is None, (
        "without pageToken: everything at once"
    )
    for bad in ("0", "-1", "two"):
        assert_error(
            request(server, "GET", f"/v1/namespaces/web/tables?pageToken=&pageSize={bad}"), 400, "BadRequestException"
        )
    assert_error(request(server, "GET", "/v1/namespaces/nothing/tables"), 404, "NoSuchNamespaceException")


def test_raw_table_load_exists_and_etag(served) -> None:
    deployment, server = served
    here = open_catalog(deployment).load_table(IDENT)
    status, headers, body = request(server, "GET", "/v1/namespaces/web/tables/access")
    assert status == 200 and set(body) >= {"metadata-location", "metadata"}
    assert body["metadata-location"] == here.metadata_location
    metadata = body["metadata"]
    assert metadata["format-version"] == 2 and metadata["table-uuid"] == str(here.metadata.table_uuid)
    assert metadata["current-snapshot-id"] == here.current_snapshot().snapshot_id
    assert len(metadata["snapshots"]) == len(here.snapshots())
    etag = headers["ETag"]
    status, _, body = request(server, "GET", "/v1/namespaces/web/tables/access", headers={"If-None-Match": etag})
    assert (status, body) == (304, None), "unchanged since the tag: no body"
    status, _, body = request(
        server, "GET", "/v1/namespaces/web/tables/access", headers={"If-None-Match": '"an-older-tag"'}
    )
    assert status == 200 and body["metadata-location"] == here.metadata_location
    assert request(server, "GET", "/v1/namespaces/web/tables/access?snapshots=refs")[0] == 200
    assert_error(request(server, "GET", "/v1/namespaces/web/tables/access?snapshots=some"), 400, "BadRequestException")
    assert_error(request(server, "GET", "/v1/namespaces/web/tables/nothing"), 404, "NoSuchTableException")
    assert_error(request(server, "GET", "/v1/namespaces/nothing/tables/access"), 404, "NoSuchTableException")
    assert request(server, "HEAD", "/v1/namespaces/web/tables/access")[0] == 204
    assert request(server, "HEAD", "/v1/namespaces/web/tables/nothing")[0] == 404
    # A new version: a new metadata file, so a new tag, and the old one no longer answers 304.
    record = deployment.catalog.tables.get("web.access")
    add_small_objects(deployment, record, NEXT_DAY, [rows_for(NEXT_DAY, 5, 2)])
    assert not publish_once(deployment, now=tokyo(NEXT_DAY, 13)).target_errors
    status, headers, _ = request(server, "GET", "/v1/namespaces/web/tables/access", headers={"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag


def test_raw_metrics_reports_are_taken_with_204(served) -> None:
    deployment, server = served
    here = open_catalog(deployment).load_table(IDENT)
    scan_report = {
        "report-type": "scan-report",
        "table-name": "siltlake.web.access",
        "snapshot-id": here.current_snapshot().snapshot_id,
        "filter": True,
        "schema-id": 0,
        "projected-field-ids": [2],
        "projected-field-names": ["user_id"],
        "metrics": {"result-data-files": {"unit": "count", "value": 2}},
    }
    status, _, body = request(server, "POST", "/v1/namespaces/web/tables/access/metrics", scan_report)
    assert (status, body) == (204, None)
    assert_error(
        request(server, "POST", "/v1/namespaces/web/tables/nothing/metrics", scan_report), 404, "NoSuchTableException"
    )
    assert_error(
        request(server, "POST", "/v1/namespaces/web/tables/access/metrics", ["not", "a", "report"]),
        400,
        "BadRequestException",
    )


def test_every_write_of_the_spec_is_refused_with_403_and_nothing_changes(served) -> None:
    deployment, server = served
    before = open_catalog(deployment).load_table(IDENT).metadata_location
    identifier = {"namespace": ["web"], "name": "access"}
    writes = [
        ("POST", "/v1/namespaces", {"namespace": ["other"], "properties": {}}),
        ("DELETE", "/v1/namespaces/web", None),
        ("POST", "/v1/namespaces/web/properties", {"removals": [], "updates": {"owner": "me"}}),
        ("POST", "/v1/namespaces/web/tables", {"name": "new", "schema": {"type": "struct", "fields": []}}),
        ("POST", "/v1/namespaces/web/register", {"name": "new", "metadata-location": before}),
        ("POST", "/v1/namespaces/web/tables/access", {"requirements": [], "updates": []}),
        ("DELETE", "/v1/namespaces/web/tables/access?purgeRequested=true", None),
        ("POST", "/v1/tables/rename", {"source": identifier, "destination": {**identifier, "name": "moved"}}),
        ("POST", "/v1/transactions/commit", {"table-changes": []}),
        ("POST", "/v1/namespaces/web/views", {"name": "v"}),
        ("PUT", "/v1/namespaces/web/tables/access", {}),
    ]
    for method, path, body in writes:
        message = assert_error(request(server, method, path, body), 403, "ForbiddenException")
        assert "read-only" in message and path.split("?")[0] in message, message
    assert_error(
        request(server, "POST", "/v1/namespaces/web/tables/access/plan", {}), 406, "UnsupportedOperationException"
    )
    assert_error(request(server, "GET", "/v1/namespaces/web/views"), 404, "NoSuchEndpointException")
    assert_error(request(server, "GET", "/v2/config"), 404, "NoSuchEndpointException")
    sql = open_catalog(deployment)
    assert sql.load_table(IDENT).metadata_location == before
    assert sorted(sql.list_namespaces()) == [("web",)] and sql.list_tables("web") == [("web", n) for n in TABLES]


def files_under(root: Path) -> set[str]:
    return {str(path) for path in root.rglob("*") if path.is_file()}


def test_a_refused_append_leaves_nothing_once_reap_grace_has_passed(served) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    deployment, server = served
    lake = Path(deployment.config.storage.root)
    sql = open_catalog(deployment)
    here = sql.load_table(IDENT)
    # A file an Iceberg snapshot references inside the table's own data area (as an engine's write through the SQL
    # catalog puts there): reap must keep it, whatever else lies beside it.
    with here.transaction() as transaction:
        transaction.append(here.scan().to_arrow().slice(0, 1))
    committed = sql.load_table(IDENT)
    referenced = {lake_key(deployment, task.file.file_path) for task in committed.scan().plan_files()}
    referenced_here = {key for key in referenced if "/_iceberg/" in f"/{key}"}
    assert referenced_here, "the engine's data file lies under _iceberg/"
    before = files_under(lake)
    rest = RestCatalog("siltlake", uri=server.url)
    table = rest.load_table(IDENT)
    with pytest.raises(NotImplementedError):
        table.append(table.scan().to_arrow().slice(0, 3))
    with pytest.raises(NotImplementedError):
        table.delete("user_id = 3")
    leftovers = files_under(lake) - before
    assert any("/data/" in path for path in leftovers) and any(path.endswith(".avro") for path in leftovers), (
        f"PyIceberg writes its files before its commit is refused: {sorted(leftovers)}"
    )
    assert sql.load_table(IDENT).metadata_location == committed.metadata_location
    young = reap_once(deployment, now=utcnow(), full=True, grace=3600)
    assert files_under(lake) >= leftovers and young.kept_young >= len(leftovers), "inside the grace period: kept"
    present = files_under(lake)
    later = utcnow() + dt.timedelta(hours=2)
    dry = reap_once(deployment, now=later, grace=3600, dry_run=True)
    assert files_under(lake) == present, "a dry run deletes nothing"
    report = reap_once(deployment, now=later, grace=3600)
    assert not report.full_sweep, "an incremental run lists _iceberg/ too"
    assert [(dry.reasons[r].objects, dry.reasons[r].bytes) for r in ("orphan", "expired")] == [
        (report.reasons[r].objects, report.reasons[r].bytes) for r in ("orphan", "expired")
    ], "the dry run saw them"
    left = files_under(lake)
    assert present - left == leftovers, (
        f"deleted besides: {sorted(present - left - leftovers)}; left behind: {sorted(leftovers & left)}"
    )
    assert report.reasons["orphan"].objects == len([p for p in leftovers if "/data/" in p]), (
        "a writer's data files no snapshot ever listed are orphans (its manifests: metadata no snapshot needs)"
    )
    assert all((lake / key).exists() for key in referenced_here), "a file a snapshot references stays"
    after = sql.load_table(IDENT)
    assert rows(after.scan().to_arrow()) == rows(committed.scan().to_arrow()), "every snapshot file still reads"


def test_duckdb_reads_through_the_server_and_its_refused_insert_is_reaped(served) -> None:
    """DuckDB's iceberg extension (the readers venv) ATTACHes the server and reads; it sends its INSERT's commit
    whatever `endpoints` says, gets the 403, and leaves the manifests it wrote, which reap removes after the grace."""
    from .duckdb_iceberg_runner import run_queries
    from .test_iceberg_readers import require_readers_venv

    require_readers_venv()
    deployment, server = served
    lake = Path(deployment.config.storage.root)
    before = files_under(lake)
    attach = f"ATTACH 'siltlake' AS lake (TYPE iceberg, ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none')"
    count, inserted = run_queries(
        [
            "SELECT count(*) AS n FROM lake.web.access",
            "INSERT INTO lake.web.access SELECT * FROM lake.web.access LIMIT 2",
        ],
        (attach,),
    )
    assert count.column("n").to_pylist() == [Lake(deployment).table("web.access").to_arrow().num_rows]
    assert isinstance(inserted, str) and "403" in inserted and "read-only" in inserted, inserted
    leftovers = files_under(lake) - before
    assert leftovers, "DuckDB wrote its manifests before the commit was refused"
    present = files_under(lake)
    reap_once(deployment, now=utcnow() + dt.timedelta(hours=2), grace=3600, full=True)
    assert present - files_under(lake) == leftovers

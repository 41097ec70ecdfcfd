"""`silt iceberg serve`: a read-only Iceberg REST catalog over the Iceberg target's catalog (docs/design.md,
"Iceberg target"), so that engines attach the same tables and snapshots with no access to the catalog database.

It serves, as the REST catalog spec (apache/iceberg open-api/rest-catalog-open-api.yaml) defines them, what a reader
needs: the config (whose `endpoints` list is exactly what is served, so clients refuse writes before sending them),
namespaces (children of `parent`, paged when a client sends `pageToken`), a namespace's properties and existence, its
tables (paged alike), a table's metadata (with an ETag; `If-None-Match` answered 304) and existence, and metrics
reports (204, logged). A write is answered 403 ForbiddenException; an unknown namespace or table 404 with the
spec's NoSuchNamespaceException or NoSuchTableException. Data and metadata files are read by the engine from the
lake itself, as with the SQL catalog.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from siltlake.httpd import MAX_CONNECTIONS, REQUEST_TIMEOUT, BoundedHandler, BoundedServer
from siltlake.logs import event
from siltlake.publish.iceberg.catalog import open_catalog

if TYPE_CHECKING:
    from siltlake.deployment import Deployment

log = logging.getLogger(__name__)
NAMESPACE_SEPARATOR = "\x1f"  # the REST spec's separator of a multi-level namespace in a path or `parent`
MAX_BODY = 1 << 20  # a metrics report or a refused write's request, read whole before answering
SERVED = (  # the `endpoints` of /v1/config, in the spec's "<verb> <path>" form
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
)
PLANNING = ("plan", "tasks")  # server-side scan planning: a read this catalog leaves to the client


class Answer(Exception):
    """An error answer: its HTTP code and the spec's error type (IcebergErrorResponse)."""

    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind


def etag_of(metadata_location: str) -> str:
    """A table's ETag: the metadata file names one version of the table's metadata (every load serves all of its
    snapshots, whatever `snapshots` asks, so one tag per version)."""
    return '"' + hashlib.sha256(metadata_location.encode()).hexdigest()[:32] + '"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    tags = {tag.strip().removeprefix("W/") for tag in (if_none_match or "").split(",")}
    return "*" in tags or etag in tags


class _Handler(BoundedHandler):
    server: IcebergRestServer
    reading = "answer"  # what the request was reading when it failed, in the words of the 503's message

    def _send(self, code: int, body: dict[str, Any] | None, headers: Sequence[tuple[str, str]] = ()) -> None:
        self.send_body(code, json.dumps(body).encode() if body is not None else b"", "application/json", headers)

    def _error(self, code: int, kind: str, message: str) -> None:
        self._send(code, {"error": {"message": message, "type": kind, "code": code}})

    def _handle(self) -> None:
        split = urlsplit(self.path)
        parts = [unquote(p) for p in split.path.strip("/").split("/")]
        query = {name: values[-1] for name, values in parse_qs(split.query, keep_blank_values=True).items()}
        try:
            if parts[:1] != ["v1"]:
                raise Answer(404, "NoSuchEndpointException", f"no endpoint {split.path}: this catalog serves /v1/...")
            self._route(parts[1:], query)
        except Answer as answer:
            self._error(answer.code, answer.kind, str(answer))
        except Exception as exc:  # one failed request must not end the server
            # The exception may carry the catalog's SQL and its parameters: they go to the log, not to the client.
            reference = self.failed(exc)
            self._error(
                503,
                "ServiceUnavailableException",
                f"siltlake could not read the Iceberg catalog to {self.reading}; the server's log says why "
                f"(iceberg_rest.failed reference={reference})",
            )

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = _handle  # http.server's names

    def _route(self, rest: list[str], query: dict[str, str]) -> None:
        method = self.command
        reads = method in ("GET", "HEAD")
        if rest == ["config"] and reads:
            return self._send(200, {"defaults": {}, "overrides": {}, "endpoints": list(SERVED)})
        if rest == ["namespaces"] and reads:
            return self._send(200, self._namespaces(query))
        if len(rest) >= 2 and rest[0] == "namespaces":
            namespace = tuple(rest[1].split(NAMESPACE_SEPARATOR))
            tail = rest[2:]
            if not tail and reads:
                return self._namespace(namespace)
            if tail == ["tables"] and reads:
                return self._send(200, self._tables(namespace, query))
            if len(tail) == 2 and tail[0] == "tables" and reads:
                return self._table(namespace, tail[1], query)
            if len(tail) == 3 and tail[0] == "tables" and tail[2] == "metrics" and method == "POST":
                return self._metrics(namespace, tail[1])
            if len(tail) == 3 and tail[0] == "tables" and tail[2] in PLANNING and method == "POST":
                self.read_body(MAX_BODY)
                raise Answer(
                    406,
                    "UnsupportedOperationException",
                    "siltlake's Iceberg REST catalog does not plan scans: plan in the client "
                    "(it reads the table's metadata and manifests from the lake)",
                )
        if not reads:
            self.read_body(MAX_BODY)  # before answering: a client still sending would see its connection reset
            raise Answer(
                403,
                "ForbiddenException",
                f"siltlake's Iceberg REST catalog is read-only: {method} {urlsplit(self.path).path} is "
                "refused; tables change only through siltlake (its publish runs commit the snapshots)",
            )
        raise Answer(
            404,
            "NoSuchEndpointException",
            f"no endpoint {method} {urlsplit(self.path).path}; this catalog serves: {', '.join(SERVED)}",
        )

    def _namespaces(self, query: dict[str, str]) -> dict[str, Any]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        parent = tuple(query["parent"].split(NAMESPACE_SEPARATOR)) if query.get("parent") else ()
        self.reading = "list the namespaces"
        try:
            children = open_catalog(self.server.deployment).list_namespaces(parent)
        except NoSuchNamespaceError:
            raise Answer(404, "NoSuchNamespaceException", f"no namespace {'.'.join(parent)}") from None
        page, more = _page([tuple(n) for n in children], NAMESPACE_SEPARATOR.join, query)
        return {"namespaces": [list(n) for n in page], **more}

    def _namespace(self, namespace: tuple[str, ...]) -> None:
        from pyiceberg.exceptions import NoSuchNamespaceError

        self.reading = f"load namespace {'.'.join(namespace)}"
        try:
            properties = open_catalog(self.server.deployment).load_namespace_properties(namespace)
        except NoSuchNamespaceError:
            raise Answer(404, "NoSuchNamespaceException", f"no namespace {'.'.join(namespace)}") from None
        if self.command == "HEAD":
            return self._send(204, None)
        return self._send(200, {"namespace": list(namespace), "properties": properties})

    def _tables(self, namespace: tuple[str, ...], query: dict[str, str]) -> dict[str, Any]:
        from pyiceberg.exceptions import NoSuchNamespaceError

        self.reading = f"list the tables of namespace {'.'.join(namespace)}"
        catalog = open_catalog(self.server.deployment)
        try:
            if not catalog.namespace_exists(namespace):
                raise NoSuchNamespaceError(".".join(namespace))
            names = [ident[-1] for ident in catalog.list_tables(namespace)]
        except NoSuchNamespaceError:
            raise Answer(404, "NoSuchNamespaceException", f"no namespace {'.'.join(namespace)}") from None
        page, more = _page(names, str, query)
        return {"identifiers": [{"namespace": list(namespace), "name": name} for name in page], **more}

    def _load(self, namespace: tuple[str, ...], name: str) -> Any:  # PyIceberg's Table
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        self.reading = f"load table {'.'.join(namespace)}.{name}"
        try:
            return open_catalog(self.server.deployment).load_table((*namespace, name))
        except (NoSuchTableError, NoSuchNamespaceError):
            raise Answer(404, "NoSuchTableException", f"no table {'.'.join(namespace)}.{name}") from None

    def _table(self, namespace: tuple[str, ...], name: str, query: dict[str, str]) -> None:
        if query.get("snapshots", "all") not in ("all", "refs"):
            raise Answer(
                400, "BadRequestException", f"snapshots={query['snapshots']!r}: the spec allows 'all' or 'refs'"
            )
        table = self._load(namespace, name)
        if self.command == "HEAD":
            return self._send(204, None)
        etag = etag_of(table.metadata_location)
        if _matches(self.headers.get("If-None-Match"), etag):
            return self._send(304, None, [("ETag", etag)])
        return self._send(
            200,
            {
                "metadata-location": table.metadata_location,
                "metadata": json.loads(table.metadata.model_dump_json()),
                "config": {},
            },
            [("ETag", etag)],
        )

    def _metrics(self, namespace: tuple[str, ...], name: str) -> None:
        body = self.read_body(MAX_BODY)
        if body is None:
            raise Answer(
                400,
                "BadRequestException",
                f"a metrics report must come whole with its Content-Length, at most {MAX_BODY} bytes",
            )
        try:
            report = json.loads(body)
        except ValueError as exc:
            raise Answer(400, "BadRequestException", f"the metrics report is not JSON: {exc}") from None
        if not isinstance(report, dict) or not isinstance(report.get("report-type"), str):
            raise Answer(
                400,
                "BadRequestException",
                "a metrics report is a JSON object with a 'report-type' (scan-report or commit-report)",
            )
        self._load(namespace, name)
        event(
            log,
            "iceberg_rest.metrics",
            logging.DEBUG,
            table=".".join((*namespace, name)),
            report_type=report["report-type"],
            client=self.client_address[0],
        )
        return self._send(204, None)


def _page(items: list[Any], key: Callable[[Any], str], query: dict[str, str]) -> tuple[list[Any], dict[str, Any]]:
    """The spec's pagination: without `pageToken`, every item and a null next token; with one (empty: the first
    page), at most `pageSize` items after the token, which is the last key a page returned (so an item added or
    removed between pages moves no other across a page boundary)."""
    items = sorted(items, key=key)
    if "pageToken" not in query:
        return items, {"next-page-token": None}
    size = query.get("pageSize") or ""
    if size and not (size.isdigit() and int(size) >= 1):
        raise Answer(400, "BadRequestException", f"pageSize={size!r}: a positive integer is expected")
    after = query["pageToken"]
    rest = [item for item in items if key(item) > after] if after else items
    page = rest[: int(size)] if size else rest
    more = len(page) < len(rest)
    return page, {"next-page-token": key(page[-1]) if more else None}


class IcebergRestServer(BoundedServer):
    """The server on its own daemon thread (start(), close()); port 0 picks a free port (server_port). Its bounds
    are httpd.BoundedServer's: at most max_connections at once, and a request's headers within request_timeout."""

    log = log  # the events under this module's logger
    event_prefix = "iceberg_rest"
    thread_name = "silt-iceberg-rest"
    busy = (
        json.dumps(
            {
                "error": {
                    "message": "busy: too many open connections",
                    "type": "ServiceUnavailableException",
                    "code": 503,
                }
            }
        ).encode(),
        "application/json",
    )

    def __init__(
        self,
        deployment: Deployment,
        host: str = "127.0.0.1",
        port: int = 8181,
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.deployment = deployment
        super().__init__((host, port), _Handler, max_connections=max_connections, request_timeout=request_timeout)

    @property
    def url(self) -> str:
        """http://host:port, the uri engines are given."""
        return super().url.rstrip("/")

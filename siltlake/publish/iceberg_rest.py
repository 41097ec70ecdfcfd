"""`silt iceberg serve`: a read-only Iceberg REST catalog over the Iceberg target's catalog (docs/design.md,
"Iceberg target"), so that engines attach the same tables and snapshots with no access to the catalog database.

The endpoints engines need to read: GET /v1/config, the namespaces, the tables of one, and a table's current
metadata (its location and the metadata itself); HEAD of a namespace or table. Anything else (a write, a
commit, a drop) is answered 405 with the REST error body. Data and metadata files are read by the engine
from the lake itself, as with the SQL catalog.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from siltlake.logs import event
from siltlake.publish.iceberg import open_catalog

if TYPE_CHECKING:
    from siltlake.deployment import Deployment

log = logging.getLogger(__name__)
NAMESPACE_SEPARATOR = "\x1f"  # the REST spec's separator of a multi-level namespace in a path


class NotFound(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Handler(BaseHTTPRequestHandler):
    server: IcebergRestServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        event(log, "iceberg_rest.request", logging.DEBUG, client=self.client_address[0], request=format % args)

    def _send(self, code: int, body: dict[str, Any] | None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD" and data:
            self.wfile.write(data)

    def _error(self, code: int, kind: str, message: str) -> None:
        self._send(code, {"error": {"message": message, "type": kind, "code": code}})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        try:
            self._send(200 if self.command == "GET" else 204, self._answer(parts))
        except NotFound as exc:
            self._error(404, exc.kind, str(exc))
        except Exception as exc:  # noqa: BLE001 - one failed request must not end the server
            event(log, "iceberg_rest.failed", logging.WARNING, path=self.path, reason=f"{type(exc).__name__}: {exc}")
            self._error(503, "ServiceUnavailableException", f"siltlake could not read the Iceberg catalog: "
                                                            f"{type(exc).__name__}: {exc}")

    do_HEAD = do_GET

    def _answer(self, parts: list[str]) -> dict[str, Any] | None:
        catalog = open_catalog(self.server.deployment)
        if parts[:1] != ["v1"]:
            raise NotFound("NoSuchEndpointException", f"no endpoint {self.path}: this catalog serves /v1/...")
        rest = parts[1:]
        if rest == ["config"]:
            return {"defaults": {}, "overrides": {}}
        if rest == ["namespaces"]:
            return {"namespaces": [list(n) for n in catalog.list_namespaces()]}
        if len(rest) < 2 or rest[0] != "namespaces":
            raise NotFound("NoSuchEndpointException", f"no endpoint {self.path}")
        namespace = tuple(rest[1].split(NAMESPACE_SEPARATOR))
        if namespace not in {tuple(n) for n in catalog.list_namespaces()}:
            raise NotFound("NoSuchNamespaceException", f"no namespace {'.'.join(namespace)}")
        if len(rest) == 2:
            return {"namespace": list(namespace), "properties": {}}
        if rest[2] == "tables" and len(rest) == 3:
            return {"identifiers": [{"namespace": list(ident[:-1]), "name": ident[-1]}
                                    for ident in catalog.list_tables(namespace)]}
        if rest[2] == "tables" and len(rest) == 4:
            from pyiceberg.exceptions import NoSuchTableError

            try:
                table = catalog.load_table((*namespace, rest[3]))
            except NoSuchTableError:
                raise NotFound("NoSuchTableException", f"no table {'.'.join(namespace)}.{rest[3]}") from None
            return {"metadata-location": table.metadata_location,
                    "metadata": json.loads(table.metadata.model_dump_json()), "config": {}}
        raise NotFound("NoSuchEndpointException", f"no endpoint {self.path}")

    def _read_only(self) -> None:
        self._error(405, "NotAllowedException", "siltlake's Iceberg REST catalog is read-only: tables change "
                                                "through siltlake (its publish runs commit the snapshots)")

    do_POST = do_PUT = do_DELETE = do_PATCH = _read_only


class IcebergRestServer(ThreadingHTTPServer):
    """The server on its own daemon thread (start(), close()); port 0 picks a free port (server_port)."""

    daemon_threads = True

    def __init__(self, deployment: Deployment, host: str = "127.0.0.1", port: int = 8181) -> None:
        self.deployment = deployment
        super().__init__((host, port), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, name="silt-iceberg-rest", daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> IcebergRestServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.shutdown()
        self.server_close()

"""A local S3 endpoint for the S3 suite: moto's server on 127.0.0.1, and a loopback proxy in front of it that
counts requests by method and injects 500/503 answers. No network beyond loopback.

The AWS settings siltlake's S3 file system reads (credentials, no instance metadata) are set by conftest before
Spark starts, so Spark's Python workers inherit them like any process on a user's host. conftest loads this
module as a plugin (its fixtures: moto_s3, s3_proxy, s3_deployment)."""

from __future__ import annotations

import http.client
import logging
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from siltlake.config import Config
from siltlake.deployment import Deployment

from .processes import free_port

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}


class MotoS3:
    """moto's S3 server on 127.0.0.1; stop() and start() again keep every bucket (its state is in-process)."""

    def __init__(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.port = free_port()
        self._server = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> MotoS3:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def create_bucket(self, name: str | None = None) -> str:
        import pyarrow.fs as pafs

        name = name or f"silt-{uuid.uuid4().hex[:12]}"
        pafs.S3FileSystem(
            endpoint_override=self.endpoint, scheme="http", region="us-east-1", allow_bucket_creation=True
        ).create_dir(name)
        return name

    def put_objects(self, bucket: str, keys: list[str], body: bytes = b"x") -> None:
        """Put objects straight into the server's in-process state (fast set-up of large listings)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        backend = s3_backends[DEFAULT_ACCOUNT_ID]["global"]
        for key in keys:
            backend.put_object(bucket, key, body)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args) -> None:  # http.server's signature
        pass

    def _body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return b""

    def _handle(self) -> None:
        body = self._body()
        proxy = self.server.owner
        fault = proxy.record(self.command, self.path)
        if fault:
            payload = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{fault[1]}</Code>'
                f"<Message>injected by the test proxy</Message></Error>"
            ).encode()
            self.send_response(fault[0])
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            return
        headers = {name: value for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP}
        headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except OSError:  # the server is down: the client sees a dropped connection, as from a dead endpoint
            self.close_connection = True
            return
        finally:
            upstream.close()
        self.send_response(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _HOP_BY_HOP and not (name.lower() == "content-length" and self.command != "HEAD"):
                self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle  # http.server's names


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: CountingProxy


class CountingProxy:
    """An HTTP proxy on 127.0.0.1 in front of the S3 server: counts requests by method (and LIST requests
    apart), and answers every `fail_every`-th request with 503 SlowDown or 500 InternalError, alternately,
    without passing it on (both are what AWS answers under throttling and internal faults; the SDK retries)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.counts: Counter[str] = Counter()
        self.injected = 0
        self.fail_every = 0
        self.log: list[str] | None = None  # a list: every request's method and path is appended
        self._lock = threading.Lock()
        self._server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def record(self, method: str, path: str) -> tuple[int, str] | None:
        with self._lock:
            kind = "LIST" if method == "GET" and ("list-type=" in path or "delimiter=" in path) else method
            self.counts[kind] += 1
            self.counts["total"] += 1
            if self.log is not None:
                self.log.append(f"{kind} {path}")
            if self.fail_every and self.counts["total"] % self.fail_every == 0:
                self.injected += 1
                return (503, "SlowDown") if self.injected % 2 else (500, "InternalError")
            return None

    def reset(self) -> Counter[str]:
        """The counts so far; the counter starts again from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
            return counts

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- fixtures (conftest loads this module as a plugin) ---------------------------------------------------


@pytest.fixture(scope="session")
def moto_s3():
    server = MotoS3().start()
    yield server
    server.stop()


@pytest.fixture
def s3_proxy(moto_s3: MotoS3):
    proxy = CountingProxy(moto_s3.port)
    yield proxy
    proxy.close()


def s3_config(bucket: str, endpoint: str, catalog_url: str, max_attempts: int = 10, **sections: object) -> Config:
    return Config.model_validate(
        {
            "instance_key": "s3test01",
            "catalog": {"url": catalog_url},
            "storage": {
                "root": f"s3://{bucket}/lake",
                "staging_root": f"s3://{bucket}/staging",
                "s3": {"endpoint_override": endpoint, "scheme": "http", "max_attempts": max_attempts},
            },
            "spark": {"master": "local[2]"},
            **sections,
        }
    )


@pytest.fixture
def s3_deployment(tmp_path: Path, spark, moto_s3: MotoS3, s3_proxy: CountingProxy) -> Deployment:
    """A deployment whose lake and staging roots are in a fresh bucket, reached through the counting proxy."""
    config = s3_config(moto_s3.create_bucket(), s3_proxy.endpoint, f"sqlite:///{tmp_path / 'catalog.db'}")
    deployment = Deployment(config)
    deployment.init()
    deployment.use_spark(spark)
    yield deployment
    deployment.close()

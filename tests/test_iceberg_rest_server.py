"""`silt iceberg serve` under hostile clients, with real sockets on 127.0.0.1: connections are bounded and their
requests timed out as the dashboard's are (siltlake.httpd), and a failure is answered without the SQL behind it."""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.httpd import MAX_CONNECTIONS
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.rest import IcebergRestServer

from .conftest import make_config
from .processes import wait_until
from .slow_clients import Drippers, closed_by_server


@pytest.fixture
def iceberg_deployment(tmp_path: Path) -> Deployment:
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.config.publish.targets = ["iceberg"]
    deployment.init()
    yield deployment
    deployment.close()


def config_answer(server: IcebergRestServer) -> dict:
    with urllib.request.urlopen(f"{server.url}/v1/config", timeout=5) as answer:
        return json.loads(answer.read())


def test_idle_and_slow_connections_hold_a_bounded_number_of_threads_for_a_bounded_time(
    iceberg_deployment: Deployment,
) -> None:
    open_catalog(iceberg_deployment)  # PyIceberg imported and its catalog made before anything is timed
    before = threading.active_count()
    server = IcebergRestServer(iceberg_deployment, "127.0.0.1", 0, max_connections=8, request_timeout=1.5).start()
    address = server.server_address[:2]
    idle = []
    try:
        for _ in range(300):  # connections that never send a byte
            idle.append(socket.create_connection(address, timeout=5))
        time.sleep(0.5)
        assert threading.active_count() <= before + 1 + 8, "one thread per connection, past the bound"
        started = time.monotonic()
        assert config_answer(server)["defaults"] == {}, "a fresh client takes an idle one's slot"
        assert time.monotonic() - started < 1.0
        # Each is closed: refused at once, or its slot taken by a newer one, or past request_timeout.
        deadline = time.monotonic() + 1.5 + 2
        assert all(closed_by_server(client, deadline) for client in idle)
    finally:
        for client in idle:
            client.close()
        server.close()


def test_slow_drip_clients_hold_no_slot_a_fresh_client_needs(iceberg_deployment: Deployment) -> None:
    server = IcebergRestServer(iceberg_deployment, "127.0.0.1", 0, request_timeout=2.0).start()
    drippers = Drippers(server.server_address[:2], MAX_CONNECTIONS + 8, interval=0.3).start()
    try:
        time.sleep(0.6)
        for _ in range(3):
            started = time.monotonic()
            assert config_answer(server)["defaults"] == {}
            assert time.monotonic() - started < 1.5
        wait_until(lambda: drippers.open_count() == 0, [], 6, "the server ending every dripping connection")
        assert drippers.ended_within(2.0), (drippers.closed_after, drippers.stalled)
    finally:
        drippers.stop()
        server.close()


def test_a_failure_is_answered_in_user_terms_and_its_details_logged(
    iceberg_deployment: Deployment, tmp_path: Path, caplog
) -> None:
    open_catalog(iceberg_deployment)  # the Iceberg catalog's tables exist; then one of them goes
    with sqlite3.connect(tmp_path / "iceberg.db") as database:
        database.execute("DROP TABLE iceberg_tables")
    server = IcebergRestServer(iceberg_deployment, "127.0.0.1", 0).start()
    try:
        with (
            caplog.at_level(logging.WARNING, logger="siltlake.publish.iceberg.rest"),
            pytest.raises(urllib.error.HTTPError) as failed,
        ):
            urllib.request.urlopen(f"{server.url}/v1/namespaces", timeout=10)
    finally:
        server.close()
    assert failed.value.code == 503
    error = json.loads(failed.value.read())["error"]
    assert error["type"] == "ServiceUnavailableException" and error["code"] == 503
    message = error["message"]
    assert message.startswith("siltlake could not read the Iceberg catalog to list the namespaces"), message
    for internal in ("SELECT", "iceberg_tables", "parameters", "sqlite", "OperationalError"):
        assert internal not in message, message
    reference = message.split("reference=")[1].rstrip(")")
    logged = [r.getMessage() for r in caplog.records if f"reference={reference}" in r.getMessage()]
    assert logged and "iceberg_tables" in logged[0], "the details are in the server's log, under the reference"


def test_a_request_body_dripped_past_request_timeout_is_not_waited_for(iceberg_deployment: Deployment) -> None:
    """The headers came in time; the body (a metrics report, a refused write) must come within request_timeout
    too, or the thread it holds is freed."""
    server = IcebergRestServer(iceberg_deployment, "127.0.0.1", 0, request_timeout=1.5).start()
    try:
        for path in ("/v1/namespaces/web/tables/access/metrics", "/v1/namespaces/web/tables/access"):
            client = socket.create_connection(server.server_address[:2], timeout=5)
            client.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{{".encode())
            started = time.monotonic()
            answer = b""
            try:
                while time.monotonic() - started < 6:
                    client.settimeout(0.3)
                    try:
                        chunk = client.recv(65536)
                    except TimeoutError:
                        client.sendall(b" ")  # one more byte of the body, never all of it
                        continue
                    if not chunk:
                        break
                    answer += chunk
            finally:
                client.close()
            assert time.monotonic() - started < 1.5 + 1.5, "the server ended the body's wait"
            assert answer.split(b" ")[1] in (b"400", b"403"), answer
    finally:
        server.close()

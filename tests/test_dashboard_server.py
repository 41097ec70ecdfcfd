"""The dashboard's HTTP server under hostile clients, with real sockets on 127.0.0.1: idle connections are
timed out and bounded, a client gone before its answer costs no traceback, a bad parameter is a 400."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest

from siltlake.deployment import Deployment
from siltlake.httpd import MAX_CONNECTIONS
from siltlake.observe import dashboard
from siltlake.observe.dashboard import ObserveServer
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .processes import wait_until
from .slow_clients import Drippers, closed_by_server


@pytest.fixture
def sqlite_deployment(tmp_path) -> Deployment:
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    yield deployment
    deployment.close()


def test_idle_connections_are_timed_out_and_never_hold_more_than_the_bound(sqlite_deployment: Deployment) -> None:
    before = threading.active_count()
    server = ObserveServer(
        sqlite_deployment, "127.0.0.1", 0, dashboard=True, max_connections=8, request_timeout=1.0
    ).start()
    host, port = server.server_address[:2]
    clients = []
    try:
        # Connections that start a request and never finish its headers (a slow-loris client).
        for _ in range(200):
            client = socket.create_connection((host, port), timeout=5)
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            clients.append(client)
        time.sleep(0.3)
        assert threading.active_count() <= before + 1 + 8, "one thread per connection, past the bound"
        # Past the bound they are refused at once (or take an older one's slot); the rest are closed past
        # request_timeout.
        deadline = time.monotonic() + 10
        assert all(closed_by_server(client, deadline) for client in clients)
        assert threading.active_count() <= before + 1 + 8
        with urllib.request.urlopen(server.url + "healthz", timeout=10) as answer:
            assert answer.read() == b"ok\n"
    finally:
        for client in clients:
            client.close()
        server.close()


def test_a_bad_parameter_is_a_400(sqlite_deployment: Deployment) -> None:
    server = ObserveServer(sqlite_deployment, "127.0.0.1", 0, dashboard=True).start()
    try:
        for hours in ("nan", "inf", "-1", "soon", "1e9"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{server.url}?hours={hours}", timeout=30)
            assert refused.value.code == 400, hours
            assert b"hours must be" in refused.value.read()
        with urllib.request.urlopen(f"{server.url}?hours=1", timeout=30) as page:
            assert "the last 60 minutes" in page.read().decode()
    finally:
        server.close()


def test_at_shows_a_past_period_and_a_bad_one_is_a_400(sqlite_deployment: Deployment) -> None:
    """A sample taken in the past (the demo's simulated days) is on the page `?at=` points to, not on now's."""
    import datetime as dt

    past = dt.datetime(2026, 11, 19, 12, 0)
    sqlite_deployment.catalog.observations.record_sample(past, {"web.access": {"pending_objects": 7}})
    server = ObserveServer(sqlite_deployment, "127.0.0.1", 0, dashboard=True).start()
    try:
        with urllib.request.urlopen(f"{server.url}?hours=2&at=2026-11-19T13:00Z", timeout=30) as page:
            then = page.read().decode()
        with urllib.request.urlopen(f"{server.url}?hours=2", timeout=30) as page:
            today = page.read().decode()
        assert "at 2026-11-19 13:00:00 UTC" in then and 'href="?hours=1&at=2026-11-19T13:00:00Z"' in then
        backlog = then.split('data-chart="backlog"')[1].split("</svg>")[0]
        assert "no samples yet" not in backlog
        assert "no samples yet" in today.split('data-chart="backlog"')[1].split("</svg>")[0]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{server.url}?at=yesterday", timeout=30)
        assert refused.value.code == 400
        assert b"at: 'yesterday' is not a time" in refused.value.read()
    finally:
        server.close()


def test_a_client_gone_before_its_answer_costs_no_503_and_no_traceback(
    sqlite_deployment: Deployment, monkeypatch, capsys, caplog
) -> None:
    gone = threading.Event()
    render = dashboard.render_page

    def render_after_the_client_left(*args: object, **kwargs: object) -> str:
        gone.wait(10)
        return render(*args, **kwargs)

    monkeypatch.setattr(dashboard, "render_page", render_after_the_client_left)
    server = ObserveServer(sqlite_deployment, "127.0.0.1", 0, dashboard=True).start()
    try:
        client = socket.create_connection(server.server_address[:2], timeout=5)
        client.sendall(b"GET / HTTP/1.0\r\n\r\n")
        time.sleep(0.3)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        client.close()
        time.sleep(0.1)
        with caplog.at_level(logging.DEBUG, logger="siltlake.observe.dashboard"):
            gone.set()
            # The page renders and its answer meets the reset socket on the handler's thread: waited for, not
            # slept for (0.5 s was too little on a loaded machine once).
            wait_until(
                lambda: any("client gone" in r.getMessage() for r in caplog.records),
                [],
                10,
                "the handler's note of the client gone",
            )
            with urllib.request.urlopen(server.url + "healthz", timeout=10) as answer:
                assert answer.read() == b"ok\n"
    finally:
        server.close()
    assert "Traceback" not in capsys.readouterr().err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "a client that left is no failure"
    assert any("client gone" in r.getMessage() for r in caplog.records)


def test_slow_drip_clients_hold_no_slot_a_fresh_client_needs(sqlite_deployment: Deployment) -> None:
    """More clients than slots each drip a byte of their request every 0.3 s: no single read waits long, so only
    a deadline for the whole request ends them. A fresh client is answered at once meanwhile (it takes the slot
    of the oldest connection still sending its headers), and every dripping connection ends within the deadline."""
    server = ObserveServer(sqlite_deployment, "127.0.0.1", 0, dashboard=True, request_timeout=2.0).start()
    drippers = Drippers(server.server_address[:2], MAX_CONNECTIONS + 8, interval=0.3).start()
    try:
        time.sleep(0.6)  # every slot taken by a dripping connection
        for _ in range(3):
            started = time.monotonic()
            with urllib.request.urlopen(server.url + "metrics", timeout=5) as answer:
                assert answer.status == 200 and b"siltlake_" in answer.read()
            assert time.monotonic() - started < 1.5
        wait_until(lambda: drippers.open_count() == 0, [], 6, "the server ending every dripping connection")
        assert drippers.ended_within(2.0), (drippers.closed_after, drippers.stalled)
    finally:
        drippers.stop()
        server.close()


def test_a_catalog_failure_is_a_503_without_its_sql(sqlite_deployment: Deployment, tmp_path, caplog) -> None:
    import sqlite3

    with sqlite3.connect(tmp_path / "catalog.db") as database:
        database.execute("DROP TABLE metric_history")
    server = ObserveServer(sqlite_deployment, "127.0.0.1", 0, dashboard=True).start()
    try:
        with (
            caplog.at_level(logging.WARNING, logger="siltlake.observe.dashboard"),
            pytest.raises(urllib.error.HTTPError) as failed,
        ):
            urllib.request.urlopen(server.url, timeout=30)
    finally:
        server.close()
    assert failed.value.code == 503
    body = failed.value.read().decode()
    assert body.startswith("siltlake could not read its catalog for /; the server's log says why"), body
    for internal in ("catalog.db", "CatalogError", "metric_history", "SELECT"):  # the exception's words
        assert internal not in body, body
    reference = body.split("reference=")[1].split(")")[0]
    assert any(f"reference={reference}" in r.getMessage() and "catalog.db" in r.getMessage() for r in caplog.records), (
        "the details are in the server's log, under the reference"
    )

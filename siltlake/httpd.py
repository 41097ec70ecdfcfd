"""The threaded HTTP server hostile clients cannot exhaust, behind the dashboard and /metrics
(`observe.dashboard`) and `silt iceberg serve` (`publish.iceberg.rest`): docs/design.md, "Hostile input".

Each connection holds a thread, at most `max_connections` at once. A request's line and headers must arrive within
`request_timeout` of the moment the server starts waiting for them, however slowly they trickle in: a bound per
read alone lets a client that sends a byte now and then hold its thread forever. When every slot is taken, a new
connection takes the slot of the oldest one still waiting for its headers (that one is closed); only when every
slot is answering a request is the new one refused with a 503, sent without blocking.
"""

from __future__ import annotations

import contextlib
import io
import logging
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from siltlake.logs import event

MAX_CONNECTIONS = 32
REQUEST_TIMEOUT = 10.0


class _DeadlineReader(io.RawIOBase):
    """A connection's bytes, each read waiting at most until `deadline` (monotonic; None: `timeout` per read)."""

    def __init__(self, connection: socket.socket, timeout: float) -> None:
        self.connection = connection
        self.timeout = timeout
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        wait = self.timeout
        if self.deadline is not None:
            wait = min(wait, self.deadline - time.monotonic())
            if wait <= 0:
                raise TimeoutError("the request did not arrive in time")
        self.connection.settimeout(wait)
        return self.connection.recv_into(buffer)


class BoundedHandler(BaseHTTPRequestHandler):
    """A request handler whose request line and headers must arrive before a deadline (BoundedServer's)."""

    server: BoundedServer

    @property
    # read by StreamRequestHandler.setup(): the socket's timeout. The stubs declare a plain attribute; this one is
    # the server's and never set on a handler.
    def timeout(self) -> float:  # type: ignore[override]
        return self.server.request_timeout

    def setup(self) -> None:
        super().setup()
        self._reader = _DeadlineReader(self.connection, self.server.request_timeout)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.deadline = time.monotonic() + self.server.request_timeout
        self.server.waiting(self.connection)
        super().handle_one_request()

    def parse_request(self) -> bool:
        try:
            parsed = super().parse_request()  # reads the headers
        finally:
            self._reader.deadline = None
            self.connection.settimeout(self.server.request_timeout)  # each later read or write
        if not self.server.working(self.connection):  # closed for a newer connection: its request is not answered
            self.close_connection = True
            return False
        return parsed

    def log_message(self, format: str, *args: object) -> None:  # the base class's name
        event(
            self.server.log,
            f"{self.server.event_prefix}.request",
            logging.DEBUG,
            client=self.client_address[0],
            request=format % args,
        )

    def send_body(self, code: int, body: bytes, content_type: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Answer with body (none to a HEAD); a client that already left is logged at debug level, not answered."""
        try:
            self.send_response(code)
            if code not in (204, 304):  # neither carries a body (RFC 9110: 204 has no Content-Length)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError as exc:  # reset, broken pipe, timed out: nobody to answer
            self.close_connection = True
            event(
                self.server.log,
                f"{self.server.event_prefix}.client_gone",
                logging.DEBUG,
                client=self.client_address[0],
                code=code,
                reason=f"client gone: {type(exc).__name__}: {exc}",
            )

    def read_body(self, limit: int) -> bytes | None:
        """The request's body (Content-Length bytes, within request_timeout however slowly they come); None when it
        is longer than `limit`, or is not sent in time (the connection is then closed after the answer)."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= limit:
            self.close_connection = True  # its unread bytes must not be taken for the next request
            return None
        self._reader.deadline = time.monotonic() + self.server.request_timeout
        try:
            body = self.rfile.read(length)
        except OSError:  # timed out or reset
            body = b""
        finally:
            self._reader.deadline = None
        if len(body) != length:
            self.close_connection = True
            return None
        return body

    def failed(self, exc: BaseException) -> str:
        """Log what failed (the details may hold SQL and its parameters: they stay in the log) under a reference the
        answer names instead."""
        reference = secrets.token_hex(4)
        event(
            self.server.log,
            f"{self.server.event_prefix}.failed",
            logging.WARNING,
            path=self.path,
            reference=reference,
            reason=f"{type(exc).__name__}: {exc}",
        )
        return reference


class _Connection:
    __slots__ = ("socket", "waiting_since", "holds_slot")

    def __init__(self, connection: socket.socket) -> None:
        self.socket = connection
        self.waiting_since: float | None = time.monotonic()  # None while a request is answered
        self.holds_slot = True  # False once its slot went to a newer connection


class BoundedServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer with a connection bound and request deadlines, on its own daemon thread (start(),
    close()). Subclasses name their logger, event prefix, thread and 503 answer."""

    daemon_threads = True
    request_queue_size = 128  # a burst of connections is accepted and answered, not left unanswered
    log = logging.getLogger(__name__)
    event_prefix = "http"
    thread_name = "silt-http"
    busy = (b"busy: too many open connections\n", "text/plain; charset=utf-8")  # a refusal's body and its type

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BoundedHandler],
        *,
        max_connections: int = MAX_CONNECTIONS,
        request_timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.max_connections = max_connections
        self.request_timeout = request_timeout
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, _Connection] = {}
        self._slots_held = 0
        super().__init__(address, handler)
        self.thread = threading.Thread(target=self.serve_forever, name=self.thread_name, daemon=True)

    # A TCP server's request is its connection's socket; the stubs' type also has a datagram server's.
    def process_request(self, request: socket.socket, client_address: tuple) -> None:  # type: ignore[override]
        evicted = None
        with self._lock:
            if self._slots_held >= self.max_connections:
                evicted = min(
                    (c for c in self._connections.values() if c.holds_slot and c.waiting_since is not None),
                    key=lambda c: c.waiting_since or 0.0,
                    default=None,
                )
                if evicted is None:
                    self._refuse(request)
                    return
                evicted.holds_slot = False  # its slot is the new connection's from now
            else:
                self._slots_held += 1
            self._connections[request] = _Connection(request)
        if evicted is not None:
            event(
                self.log,
                f"{self.event_prefix}.evicted",
                logging.DEBUG,
                reason="every connection busy: the oldest one still sending its request is closed",
            )
            with contextlib.suppress(OSError):  # its thread's read returns at once; that thread closes it
                evicted.socket.shutdown(socket.SHUT_RDWR)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._forget(request)
            raise

    # A TCP server's request is its connection's socket; the stubs' type also has a datagram server's.
    def process_request_thread(self, request: socket.socket, client_address: tuple) -> None:  # type: ignore[override]
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request: socket.socket) -> None:
        with self._lock:
            connection = self._connections.pop(request, None)
            if connection is not None and connection.holds_slot:
                self._slots_held -= 1

    def waiting(self, request: socket.socket) -> None:
        """The connection waits for a request: it may give its slot to a new connection."""
        with self._lock:
            connection = self._connections.get(request)
            if connection is not None and connection.holds_slot:
                connection.waiting_since = time.monotonic()

    def working(self, request: socket.socket) -> bool:
        """The connection's request has arrived: it keeps its slot until answered. False if the slot went to a
        newer connection meanwhile (the request is then not answered)."""
        with self._lock:
            connection = self._connections.get(request)
            if connection is None or not connection.holds_slot:
                return False
            connection.waiting_since = None
            return True

    def _refuse(self, request: socket.socket) -> None:
        # Never blocks the accepting thread: the answer fits any socket buffer, and a client that cannot
        # take it is simply disconnected.
        try:
            body, content_type = self.busy
            request.setblocking(False)
            request.send(
                b"HTTP/1.0 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: %s\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (content_type.encode(), len(body), body)
            )
        except OSError:
            pass
        self.shutdown_request(request)

    # A TCP server's request is its connection's socket; the stubs' type also has a datagram server's.
    def handle_error(self, request: socket.socket, client_address: tuple) -> None:  # type: ignore[override]
        """What escaped a handler: a log line, not a traceback on stderr."""
        exc = sys.exc_info()[1]
        level = logging.DEBUG if isinstance(exc, OSError) else logging.WARNING  # OSError: the client left
        event(
            self.log,
            f"{self.event_prefix}.failed",
            level,
            client=client_address[0],
            reason=f"{type(exc).__name__}: {exc}",
        )

    @property
    def url(self) -> str:
        """http://host:port/ (an IPv6 host in brackets)."""
        host, port = self.server_address[:2]
        if isinstance(host, bytes):  # the stubs allow an AF_UNIX address; a TCP server's host is text
            host = host.decode()
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/"

    def start(self) -> BoundedServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.shutdown()
        self.server_close()

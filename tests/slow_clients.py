"""Hostile HTTP clients on real sockets, for the tests of siltlake's HTTP servers (the dashboard and /metrics,
`silt iceberg serve`): connections that drip their request a byte at a time and never finish it."""

from __future__ import annotations

import socket
import threading
import time

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 4096


class Drippers:
    """`count` connections, each sending one byte of a request every `interval` seconds until stop() (or until
    the server closes it): every read the server waits on is short, the request never completes.

    closed_after[i] is how long connection i lived before the server ended it (None while it is open), as seen by
    the dripping loop: `stalled` is the most that loop ever ran late (a loaded test process), which delays what it
    sees by as much."""

    def __init__(self, address: tuple[str, int], count: int, interval: float) -> None:
        self.interval = interval
        self.sockets: list[socket.socket] = []
        self.opened: list[float] = []
        for _ in range(count):
            self.sockets.append(socket.create_connection(address, timeout=5))
            self.opened.append(time.monotonic())
        self.closed_after: list[float | None] = [None] * count
        self.stalled = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True)

    def start(self) -> Drippers:
        self._thread.start()
        return self

    def _drip(self) -> None:
        position = 0
        due = time.monotonic()
        while not self._stop.is_set() and position < len(REQUEST):
            self.stalled = max(self.stalled, time.monotonic() - due)
            for index, client in enumerate(self.sockets):
                if self.closed_after[index] is None and self._server_closed(client):
                    self.closed_after[index] = time.monotonic() - self.opened[index]
                if self.closed_after[index] is None:
                    try:
                        client.send(REQUEST[position : position + 1])
                    except OSError:
                        self.closed_after[index] = time.monotonic() - self.opened[index]
            position += 1
            due = time.monotonic() + self.interval
            self._stop.wait(self.interval)

    @staticmethod
    def _server_closed(client: socket.socket) -> bool:
        """Whether the server ended the connection (whatever it said first), without waiting."""
        client.setblocking(False)
        try:
            while True:
                if not client.recv(4096):
                    return True
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            client.setblocking(True)

    def ended_within(self, deadline: float) -> bool:
        """Whether the server ended every connection within `deadline` of its opening, allowing for the loop's polling
        interval and its stalls."""
        return max(after or 0.0 for after in self.closed_after) < deadline + self.interval + self.stalled + 0.2

    def open_count(self) -> int:
        return sum(1 for after in self.closed_after if after is None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for client in self.sockets:
            client.close()


def closed_by_server(client: socket.socket, deadline: float) -> bool:
    """Whether the server ends the connection before the deadline (whatever it says first)."""
    client.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        while client.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True

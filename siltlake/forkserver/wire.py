"""The messages between a `silt` client and its fork server: a 4-byte length, then that many bytes of JSON.
Strings that are not valid UTF-8 (a file name in an argument, an environment value) travel as JSON's escaped
surrogates and come back as they were sent. A request carries the client's standard streams as descriptors."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
from typing import Any

_LENGTH = struct.Struct("!I")
_CREDENTIALS = struct.Struct("3i")  # pid, uid, gid: SO_PEERCRED
LARGEST = 16 * 1024 * 1024  # an environment and a command line fit many times over


class WireError(OSError):
    """The other side closed the connection or sent something that is not a message."""


def same_user(connection: socket.socket) -> bool:
    """The process at the other end runs as this one's user (the kernel's word, SO_PEERCRED): a client sends
    its environment and streams only to its own user's server, and a server runs commands only for its user."""
    _pid, uid, _gid = _CREDENTIALS.unpack(
        connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size)
    )
    return uid == os.getuid()


def as_received(value: Any) -> Any:
    """`value` as the other side reads it (tuples become lists): what a received message is compared with."""
    return json.loads(json.dumps(value))


def send(connection: socket.socket, message: dict[str, Any], descriptors: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    header = _LENGTH.pack(len(body))
    if descriptors:
        socket.send_fds(connection, [header], descriptors)
    else:
        connection.sendall(header)
    connection.sendall(body)


def receive(connection: socket.socket, descriptors: int = 0) -> tuple[dict[str, Any], list[int]]:
    """The next message and the descriptors that came with it (at most `descriptors`)."""
    received: list[int] = []
    if descriptors:
        header, received, _flags, _address = socket.recv_fds(connection, _LENGTH.size, descriptors)
    else:
        header = connection.recv(_LENGTH.size)
    try:
        header += _exactly(connection, _LENGTH.size - len(header))
        (length,) = _LENGTH.unpack(header)
        if length > LARGEST:
            raise WireError(f"a message of {length} bytes is larger than {LARGEST}")
        message = json.loads(_exactly(connection, length))
        if not isinstance(message, dict):
            raise WireError("a message is not a JSON object")
        return message, received
    except BaseException:
        for descriptor in received:
            _close(descriptor)
        raise


def _exactly(connection: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = connection.recv(min(size, 1 << 20))
        if not chunk:
            raise WireError("the connection closed inside a message")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _close(descriptor: int) -> None:
    with contextlib.suppress(OSError):
        os.close(descriptor)

"""Logging: one line per event on stderr, as stable key=value fields or as JSON lines.

Components log through `logging.getLogger(__name__)` and `event(log, "stream.round", objects=3, ...)`; the
command line calls configure() once with --log-format and --log-level, and says who the process is
(identify(role="merge")), which every line then carries with its pid.

A key=value line: `2026-11-25T16:40:00.123Z INFO event=stream.round role=stream pid=4242 objects=3`; values
with spaces, quotes or `=` are quoted with double quotes. A JSON line: {"time": ..., "level": ..., "event": ...,
"role": ..., "pid": ..., "logger": ..., and the event's fields}.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import sys
from typing import Any, TextIO

FORMATS = ("text", "json")
_FIELDS = "silt_fields"
_EVENT = "silt_event"
_identity: dict[str, Any] = {}


def identify(**fields: Any) -> None:
    """Fields every line of this process carries from now on (role, owner, port...); pid is always added."""
    _identity.update(fields)


def event(log: logging.Logger, name: str, level: int = logging.INFO, /, **fields: Any) -> None:
    """Log the event `name` with its fields (numbers, strings, None). The record's message is the event and its
    fields as key=value, so a program using siltlake as a library and its own logging setup reads them too."""
    if log.isEnabledFor(level):
        message = " ".join([name, *(f"{key}={_quote(value)}" for key, value in fields.items())])
        log.log(level, "%s", message, extra={_FIELDS: fields, _EVENT: name}, stacklevel=2)


def _quote(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value == value else "nan"
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    text = str(value)
    if not text or any(ch in text for ch in ' "=\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


def _timestamp(record: logging.LogRecord) -> str:
    moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def record_fields(record: logging.LogRecord) -> tuple[str, dict[str, Any]]:
    """A record's event name and its fields: an event() call's, or a plain log call's message."""
    fields = getattr(record, _FIELDS, None)
    if fields is None:
        return "log", {"message": record.getMessage()}
    return getattr(record, _EVENT), dict(fields)


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        name, fields = record_fields(record)
        parts = [_timestamp(record), record.levelname, f"event={_quote(name)}"]
        parts += [f"{key}={_quote(value)}" for key, value in {**_identity, "pid": os.getpid(), **fields}.items()]
        if record.exc_info:
            exc = record.exc_info[1]
            parts.append(f"error={_quote(f'{type(exc).__name__}: {exc}')}")
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        name, fields = record_fields(record)
        document = {
            "time": _timestamp(record),
            "level": record.levelname,
            "event": name,
            **_identity,
            "pid": os.getpid(),
            "logger": record.name,
            **fields,
        }
        if record.exc_info:
            exc = record.exc_info[1]
            document["error"] = f"{type(exc).__name__}: {exc}"
        return json.dumps(document, default=str, ensure_ascii=False)


class _Handler(logging.StreamHandler):
    """The handler configure() installs (found again and replaced by the next call). Without a stream of its
    own it writes to whatever sys.stderr is at the time, so a live terminal display that redirects stderr
    (rich's, in `silt run`) prints log lines above itself."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream)
        self._own = stream

    @property
    def stream(self) -> TextIO:
        return self._own if self._own is not None else sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        self._own = value


def configure(fmt: str = "text", level: str = "warning", stream: TextIO | None = None) -> None:
    """Send siltlake's log records to stderr (or `stream`) at `level` and above, in `fmt`."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    root = logging.getLogger("siltlake")
    for handler in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(handler)
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    root.propagate = False  # py4j's and Spark's own loggers stay as they are

"""A command's failure as one line: what failed, where, why, and what to do next.

Exit status 2 means the user can fix it (configuration, paths, permissions, a lost object, Spark unreachable, a
bad query, the catalog unreachable); 75 (RETRYABLE) that a concurrent writer committed first, nothing was committed
and running the command again is safe (siltlake.RetryableConflict); 1 means an unexpected error, a bug worth
reporting with its trace.
"""

from __future__ import annotations

import errno
import importlib
import os
import re
import sys
import traceback
from dataclasses import dataclass

from siltlake.errors import RETRYABLE_EXIT, missing_data_file

USER_ERROR = 2
UNEXPECTED = 1
# Scripts rerun on it at once. An outage (the catalog down) stays 2 as before: both of its paths (siltlake's
# CatalogUnreachable, a driver's error) say the same, and rerunning at once rarely helps.
RETRYABLE = RETRYABLE_EXIT

# Names a Python exception has in a Spark worker's traceback, for the ones the user fixes.
_OS_ERRORS = {
    "OSError",
    "IOError",
    "PermissionError",
    "FileNotFoundError",
    "IsADirectoryError",
    "NotADirectoryError",
    "FileExistsError",
    "InterruptedError",
    "BlockingIOError",
}
_MISSING_FILE = re.compile(r"FileNotFoundException|FILE_NOT_EXIST|PATH_NOT_FOUND|does not exist|No such file")
_URI = re.compile(r"\b(?:file|s3a?|s3n|hdfs|gs|abfss?|wasbs?):/[^\s'\"`\]]+")
# pyarrow's file system errors: "Cannot create directory '/x/y'. Detail: [errno 20] Not a directory".
_ARROW_IO = re.compile(r"^(?:\[Errno \d+\] )?(?P<what>.+?) '(?P<where>[^']+)'\.? Detail: \[errno \d+\] (?P<why>.+)$")
_WORKER_ERROR = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Refusal|Key)): (?P<message>.*)$", re.M)
# SQLite's SQLITE_FULL and PostgreSQL's disk_full (53100) and "could not extend file" say the disk is full.
_DISK_FULL = re.compile(r"database or disk is full|No space left on device|could not extend file", re.I)
# pyarrow names the errno in its text only ("... Detail: [errno 28] No space left on device").
_ERRNO_IN_TEXT = re.compile(r"\[errno (\d+)\]", re.I)
_HINTS = {
    errno.EACCES: "check the permissions of this path (the storage roots and the catalog come from the configuration)",
    errno.EPERM: "check the permissions of this path",
    errno.EROFS: "the file system is read-only: point the configuration at a writable place",
    errno.ENOENT: "check the path (in the configuration or the command), or run `silt init`",
    errno.ENOTDIR: "a parent of this path is a file, not a directory: move it away or point the "
    "configuration elsewhere",
    errno.EISDIR: "this path is a directory where a file is expected",
    errno.ENOSPC: "the disk is full: free some space, then rerun",
}


@dataclass(frozen=True)
class Failure:
    message: str
    status: int


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _os_failure(kind: str, error_number: int | None, filename: str | None, text: str) -> Failure:
    """One line for a file system error from Python (filename set) or pyarrow (the path in its text)."""
    text = re.sub(r"^\[Errno \d+\] ", "", _first_line(text))
    found = _ARROW_IO.match(text)
    if filename:
        what, where, why = "file system error", filename, os.strerror(error_number) if error_number else text
        what = {
            "PermissionError": "permission denied",
            "FileNotFoundError": "not found",
            "IsADirectoryError": "is a directory",
            "NotADirectoryError": "not a directory",
        }.get(kind, what)
        message = f"{what} ({where})" + ("" if why.lower() == what else f": {why}")
    elif found:
        message = f"{found['what'].lower()} ({found['where']}): {found['why'].lower()}"
    else:
        message = text or kind
    if error_number is None and (number := _ERRNO_IN_TEXT.search(text)):
        error_number = int(number.group(1))
    hint = _HINTS.get(error_number) if error_number else None
    return Failure(f"{message}; {hint}" if hint else message, USER_ERROR)


def _is_spark(exc: BaseException) -> bool:
    return type(exc).__module__.split(".", 1)[0] in ("pyspark", "py4j")


def _spark_text(exc: BaseException) -> str:
    """The error's message without the Java or Python stack (py4j puts the whole Java trace in str())."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return str(java.toString())
        except Exception:  # the JVM may be gone
            pass
    getter = getattr(exc, "getMessage", None)
    if callable(getter):
        try:
            return str(getter())
        except Exception:
            pass
    return str(exc)


def _spark_failure(exc: BaseException) -> Failure:
    text = _spark_text(exc)
    name = type(exc).__name__
    if name == "PythonException" or "An exception was thrown from the Python worker" in text:
        return _worker_failure(text)
    uri = _URI.search(text)
    if uri and _MISSING_FILE.search(text):
        where = uri.group(0).rstrip(".,;:)")
        return Failure(missing_data_file(where), USER_ERROR)
    line = _first_line(text)
    if name in ("AnalysisException", "ParseException"):
        return Failure(f"Spark SQL refused the query: {line}", USER_ERROR)
    if "JAVA_GATEWAY_EXITED" in text or name in ("Py4JNetworkError",):
        return Failure(
            f"Spark could not start or went away ({line}); check `java -version` (17 or newer) and "
            "spark.master in the configuration, then rerun with --debug for Spark's log",
            USER_ERROR,
        )
    return Failure(f"Spark failed ({name}): {line}; rerun with --debug for Spark's trace", USER_ERROR)


def _is_silt_error(qualified_name: str) -> bool:
    """Whether a worker's exception, named module.Class in its traceback, is one of siltlake's SiltErrors."""
    from siltlake.errors import SiltError

    module, _, name = qualified_name.rpartition(".")
    if not module.startswith("siltlake"):
        return False
    try:
        kind = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return False
    return isinstance(kind, type) and issubclass(kind, SiltError)


def _worker_failure(text: str) -> Failure:
    """A Python exception in a Spark task: the first one raised (later ones come from clean-up)."""
    found = _WORKER_ERROR.search(text.split("Traceback (most recent call last):", 1)[-1])
    if found is None:
        return Failure(f"a Spark task failed: {_first_line(text)}; rerun with --debug for its trace", UNEXPECTED)
    kind, message = found["type"].rsplit(".", 1)[-1], found["message"]
    if kind in _OS_ERRORS:
        number = re.match(r"\[Errno (\d+)\]", message)
        return _os_failure(kind, int(number.group(1)) if number else None, None, message)
    if _is_silt_error(found["type"]):
        return Failure(message, USER_ERROR)
    return Failure(
        f"unexpected {kind} in a Spark task: {message}; this is a bug: rerun with --debug and report the trace",
        UNEXPECTED,
    )


def describe(exc: BaseException, catalog: str | None = None) -> Failure:
    """The one-line message and exit status for an exception a command did not handle."""
    failure = _describe(exc, catalog)
    message = "; ".join([failure.message, *getattr(exc, "__notes__", ())])  # notes: what was done before it failed
    # Drivers' messages span lines (psycopg adds "Is the server running...?" on a line of its own).
    return Failure(" ".join(line.strip() for line in message.splitlines() if line.strip()), failure.status)


def _describe(exc: BaseException, catalog: str | None) -> Failure:
    from siltlake.errors import RetryableConflict, SiltError

    if isinstance(exc, RetryableConflict):
        return Failure(str(exc), RETRYABLE)
    if isinstance(exc, SiltError):
        return Failure(str(exc), USER_ERROR)
    if isinstance(exc, OSError) and not _is_spark(exc):
        return _os_failure(type(exc).__name__, exc.errno, exc.filename, str(exc))
    if _is_spark(exc):
        return _spark_failure(exc)
    if "sqlalchemy" in sys.modules:  # else no catalog was opened: the exception cannot be the catalog's
        from siltlake.catalog.core import catalog_unavailable

        if catalog_unavailable(exc):
            where = f" ({catalog})" if catalog else ""
            cause = getattr(exc, "orig", None) or exc
            if _DISK_FULL.search(str(cause)):
                return Failure(
                    f"the catalog's disk is full{where}: {_first_line(str(cause))}; free some space "
                    "where the catalog database keeps its files, then rerun",
                    USER_ERROR,
                )
            return Failure(
                f"the catalog failed{where}: {_first_line(str(cause))}; check that its "
                "server is up and catalog.url is right, then rerun",
                USER_ERROR,
            )
    detail = _first_line(str(exc))
    return Failure(
        f"unexpected {type(exc).__name__}{': ' + detail if detail else ''}; this is a bug: rerun with "
        "--debug and report the trace",
        UNEXPECTED,
    )


def print_trace(exc: BaseException) -> None:
    """The full trace on stderr: Python's, then the JVM's for Spark errors."""
    traceback.print_exception(exc, file=sys.stderr)
    java_trace = getattr(exc, "_stackTrace", None)
    if java_trace:
        print(f"JVM stacktrace:\n{java_trace}", file=sys.stderr)

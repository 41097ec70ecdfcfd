"""Exceptions that carry a message meant for the user, and the switch for full traces."""

import os
from collections.abc import Iterable

DEBUG_VARIABLE = "SILTLAKE_DEBUG"


def storage_failure(exc: BaseException) -> bool:
    """Whether a failure is the storage's (unreachable, full, read-only, refused: any I/O error), not its data's:
    an outage, which the stream and merge retry without counting it against an object or a job."""
    return isinstance(exc, OSError)


def debug_enabled() -> bool:
    """`silt --debug` or SILTLAKE_DEBUG=1: show full traces (Python, Java) and Spark's error log."""
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def missing_data_file(where: str) -> str:
    """What to say of a data file the catalog lists and the storage no longer has, whichever engine read it."""
    return (
        f"a data file is missing ({where}): it was deleted or moved outside siltlake while the catalog still "
        "lists it; restore it (from a backup or the storage's versioning), then rerun"
    )


class SiltError(Exception):
    """The root of siltlake's own errors (exported as `siltlake.SiltError`): the message says what was wrong and
    what to do next. Anything else escaping siltlake (an OSError of the storage, a driver's error) is not one."""


class DefinitionError(SiltError, ValueError):
    """A table definition, type or identifier is invalid."""


class ConfigError(SiltError):
    """The configuration file or environment is invalid."""


class CatalogError(SiltError):
    """The catalog refused an operation (missing table, conflict, not initialised)."""


class RetryableError(SiltError):
    """Nothing of the operation was committed and running it again may succeed: a concurrent writer committed
    first (RetryableConflict) or a service was out (CatalogUnreachable)."""


# The exit status of a command that failed with a RetryableConflict: sysexits' EX_TEMPFAIL, "try again".
RETRYABLE_EXIT = 75


class CatalogUnreachable(CatalogError, RetryableError):
    """The catalog's server cannot be reached (down, restarting, network): a daemon retries, a command stops."""


class NotFoundError(CatalogError):
    """A named object does not exist in the catalog."""


class NoSuchPartition(NotFoundError):
    """A table has no partition of the date asked for."""


class RetryableConflict(CatalogError, RetryableError):
    """A concurrent writer committed first: nothing of this write was committed, and running it again (with the
    same request id, if it had one) is safe. delta-rs's CommitFailedError, PyIceberg's CommitFailedException."""


class UpdateConflict(RetryableConflict):
    """A concurrent writer changed the partition since this update (or append) read it: run it again."""


class MergeConflict(RetryableConflict):
    """The partition's ranges moved since the merge job planned; its output is not committed (the job runs again)."""


class VersionOutOfRange(SiltError):
    """Time travel to a table version (or time) the table does not have: before its first version, after its
    newest, or reaped away."""


class Refusal(SiltError):
    """An input siltlake will not take as it is; `reason` says why, for reports and catalog rows."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MissingExtra(SiltError):
    """A command needs a package of an optional extra that this install does not have."""


# The extras of pyproject.toml by the module each one brings, for messages that say what to install.
SPARK_EXTRA = "spark"


def require_spark(what: str) -> None:
    """Stop with an install line when PySpark is missing: reading tables installs without it (pyproject's extras)."""
    from importlib.util import find_spec

    if find_spec("pyspark") is None:
        raise MissingExtra(
            f"{what} runs Spark jobs, and PySpark is not installed here: install the {SPARK_EXTRA!r} extra, "
            f"pip install 'siltlake[{SPARK_EXTRA}]' (reading tables, silt sql on DuckDB and silt status need no Spark)"
        )


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """ " (did you mean X?)" naming the candidate closest to a mistyped name, or "" when none is close."""
    import difflib  # only when a name is wrong: not for every command's start

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def no_column(table: str, name: str, columns: Iterable[str]) -> DefinitionError:
    """The error for a column name the table lacks, with the closest of its columns."""
    return DefinitionError(
        f"table {table} has no column {name}{did_you_mean(name, columns)}; `silt table show {table}` lists its columns"
    )

"""derived: tables defined by Spark SQL over other tables, built, kept fresh and reaped (docs/design.md).

Its names load on first use: Spark's Python workers import siltlake.derived.writer for every build, and
the builder's imports (the catalog, SQLAlchemy) would slow each fresh worker's first task."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "BuildReport": "build",
    "build_derived": "build",
    "create_derived": "define",
    "RegenerateReport": "regenerator",
    "Staleness": "regenerator",
    "regenerate": "regenerator",
    "staleness": "regenerator",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'siltlake.derived' has no attribute {name!r}")
    return getattr(importlib.import_module(f"siltlake.derived.{_WHERE[name]}"), name)

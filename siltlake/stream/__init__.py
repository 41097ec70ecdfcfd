"""stream: staging objects become live and delayed small objects (docs/design.md, "Staging and stream")."""

from typing import TYPE_CHECKING

__all__ = ["Progress", "StreamReport", "discover", "map_key", "stream_forever", "stream_once"]

if TYPE_CHECKING:
    from siltlake.stream.discover import discover, map_key
    from siltlake.stream.report import StreamReport
    from siltlake.stream.runner import Progress, stream_forever, stream_once

# Imported on first use: a decoding worker imports siltlake.stream.task, and with it this package, so the
# package itself must not pull in the runner (the catalog, SQLAlchemy, the configuration).
_HOMES = {
    "discover": "discover",
    "map_key": "discover",
    "StreamReport": "report",
    "Progress": "runner",
    "stream_forever": "runner",
    "stream_once": "runner",
}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"siltlake.stream.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'siltlake.stream' has no attribute {name!r}")

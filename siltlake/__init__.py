"""siltlake: turns streams of small log batches into date-partitioned Parquet tables."""

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Lake", "Table", "__version__"]

if TYPE_CHECKING:
    from siltlake.lake import Lake, Table


def __getattr__(name: str):  # noqa: ANN202 - the table API, imported on first use: `import siltlake` stays cheap
    if name in ("Lake", "Table"):
        from siltlake import lake

        return getattr(lake, name)
    raise AttributeError(f"module 'siltlake' has no attribute {name!r}")

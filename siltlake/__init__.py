"""siltlake: turns streams of small log batches into date-partitioned Parquet tables."""

__version__ = "0.1.0"

"""Bulk loads (docs/design.md, "Load"): config, guess, tasks on Spark, resume state, one commit, cleanup."""

from siltlake.load.config import LoadConfig, load_config_file, parse_load_config
from siltlake.load.inputs import list_inputs
from siltlake.load.runner import LoadFailed, LoadReport, cleanup, load

__all__ = [
    "LoadConfig",
    "LoadFailed",
    "LoadReport",
    "cleanup",
    "list_inputs",
    "load",
    "load_config_file",
    "parse_load_config",
]

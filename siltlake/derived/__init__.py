"""derived: tables defined by Spark SQL over other tables, built, kept fresh and reaped (DESIGN §12)."""

from siltlake.derived.build import BuildReport, build_derived
from siltlake.derived.define import create_derived
from siltlake.derived.regenerate import RegenerateReport, Staleness, regenerate, staleness

__all__ = ["BuildReport", "RegenerateReport", "Staleness", "build_derived", "create_derived", "regenerate",
           "staleness"]

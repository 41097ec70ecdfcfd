"""Reap (docs/design.md): delete exactly what no retained version needs, and never another deployment's objects."""

from siltlake.reap.report import REASONS, ReapReport
from siltlake.reap.runner import ReapRefused, reap_once

__all__ = ["REASONS", "ReapRefused", "ReapReport", "reap_once"]

"""Reap (docs/design.md): delete exactly what no retained version needs, and never another deployment's objects."""

from siltlake.reap.runner import REASONS, ReapRefused, ReapReport, reap_once

__all__ = ["REASONS", "ReapRefused", "ReapReport", "reap_once"]

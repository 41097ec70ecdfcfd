"""`silt --profile` (or SILT_PROFILE=1): where a command's time went, printed on stderr at exit: the interpreter
and imports until the options were read, the command's module imports, the command itself, and the packages
imported after the start that cost most."""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

PROFILE_VARIABLE = "SILT_PROFILE"
TOP_IMPORTS = 6


def requested_by_environment() -> bool:
    return os.environ.get(PROFILE_VARIABLE, "") not in ("", "0")


def seconds_since_process_start() -> float | None:
    """Wall seconds since this process started (Linux: /proc, to a clock tick), else None."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            # The command name (field 2) may hold spaces: the fields after its closing parenthesis are fixed.
            fields = stat.read().rsplit(")", 1)[1].split()
            started_ticks = int(fields[19])  # field 22, starttime, in clock ticks after boot
            now = float(uptime.read().split()[0])
        return now - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class _TimedLoader(importlib.abc.Loader):
    """Runs the real loader's exec_module, adding the seconds it took to the top-level package's total."""

    def __init__(self, loader: Any, name: str, totals: dict[str, float]) -> None:
        self.loader, self.name, self.totals = loader, name, totals

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        started = time.perf_counter()
        try:
            self.loader.exec_module(module)
        finally:
            self.totals[self.name] = self.totals.get(self.name, 0.0) + time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:  # get_data, get_resource_reader, ...: the real loader's
        return getattr(self.loader, name)


class _ImportTimer(importlib.abc.MetaPathFinder):
    """Times the import of each top-level package first imported after the profile started (its submodules'
    time included, since they run inside it)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if "." in fullname:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _TimedLoader(spec.loader, fullname, self.totals)
                return spec
        return None


class _Profile:
    def __init__(self, command_import_seconds: Callable[[], float]) -> None:
        self.command_import_seconds = command_import_seconds
        self.started = time.perf_counter()
        self.cpu_at_start = time.process_time()
        self.before_start = seconds_since_process_start()
        self.imports = _ImportTimer()
        sys.meta_path.insert(0, self.imports)
        atexit.register(self.report)

    def report(self) -> None:
        after_start = time.perf_counter() - self.started
        command_imports = self.command_import_seconds()
        cpu = time.process_time()
        before = "?" if self.before_start is None else f"{self.before_start:.3f} s"
        total = "?" if self.before_start is None else f"{self.before_start + after_start:.3f} s"
        lines = [
            f"interpreter and imports until options read: {before} wall, {self.cpu_at_start:.3f} s CPU",
            f"command module import: {command_imports:.3f} s",
            f"command: {after_start - command_imports:.3f} s wall (its own imports included)",
            f"total: {total} wall, {cpu:.3f} s CPU",
        ]
        top = sorted(self.imports.totals.items(), key=lambda item: -item[1])[:TOP_IMPORTS]
        if top:
            lines.append("top imports after start: " + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in top))
        sys.stderr.write("".join(f"silt profile: {line}\n" for line in lines))
        sys.stderr.flush()


_profile: _Profile | None = None


def start_profile(command_import_seconds: Callable[[], float]) -> None:
    """Start the profile once; its report is printed when the process exits. command_import_seconds: the time
    spent importing command modules, read then."""
    global _profile
    if _profile is None:
        _profile = _Profile(command_import_seconds)

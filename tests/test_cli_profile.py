"""`silt --profile` and SILT_PROFILE=1 print where the time went on stderr, --help included."""

from __future__ import annotations

import os
import subprocess
import sys

REPORT_LINES = (
    "silt profile: interpreter and imports until options read:",
    "silt profile: command module import:",
    "silt profile: command:",
    "silt profile: total:",
)


def silt(*args: str, profile_variable: str | None = None) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "SILT_PROFILE"}
    if profile_variable is not None:
        environment["SILT_PROFILE"] = profile_variable
    return subprocess.run(
        [sys.executable, "-m", "siltlake.cli", *args], capture_output=True, text=True, env=environment, timeout=120
    )


def test_profile_help_reports_each_phase() -> None:
    result = silt("--profile", "--help")
    assert result.returncode == 0, result.stderr
    assert "Commands:" in result.stdout
    for line in REPORT_LINES:
        assert line in result.stderr, (line, result.stderr)


def test_the_environment_variable_profiles_too_and_nothing_without_it() -> None:
    assert "silt profile: total:" in silt("--version", profile_variable="1").stderr
    assert "silt profile" not in silt("--help").stderr
    assert "silt profile" not in silt("--help", profile_variable="0").stderr


def test_a_command_module_import_is_reported() -> None:
    result = silt("--profile", "sql", "--help")
    assert result.returncode == 0, result.stderr
    assert "silt profile: command module import:" in result.stderr

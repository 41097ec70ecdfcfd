"""The `silt` script: the command runs in a fork of this installation's fork server when one listens (it has
the libraries imported), else here. `silt forkserver ...` always runs here."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:2] != ["forkserver"]:
        from siltlake.forkserver.client import run_through_server

        status = run_through_server(sys.argv)
        if status is not None:
            sys.exit(status)
    from siltlake.cli import main as command_line

    command_line(prog_name="silt")

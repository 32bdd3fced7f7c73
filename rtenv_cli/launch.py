"""The process entry (the `rtenv` console script, `python -m rtenv_cli`).

A command runs in this user's resident rtenv when one serves it (`rtenv daemon`, resident/):
the same command, with its imports already done. Otherwise, or when the daemon cannot take it,
it runs here (cli/main.py). This module imports neither typer nor the CLI before that choice:
the package `rtenv_cli.cli` imports typer as it loads.
"""

from __future__ import annotations

import sys


def main() -> int:
    from rtenv_cli.resident import wanted

    if wanted(sys.argv[1:]):
        from rtenv_cli.resident.client import run_resident

        code = run_resident(sys.argv[1:])
        if code is not None:
            return code
    from rtenv_cli.cli.main import main as run_here

    return run_here()

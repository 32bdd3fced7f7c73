"""Run the real CLI in-process (Typer's runner) or as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def run_cli(args: list[str], *, input: str | None = None,
            env: dict[str, str] | None = None) -> CliResult:
    """Invoke `rtenv ARGS` in-process through Typer's CliRunner (real app, real error handler)."""
    from typer.testing import CliRunner

    from rtenv_cli.cli import app

    result = CliRunner().invoke(app, args, input=input, env=env, catch_exceptions=False,
                                prog_name="rtenv")
    return CliResult(result.exit_code, result.stdout, result.stderr)


def run_process(args: list[str], *, input: str | None = None,
                env: dict[str, str] | None = None, cwd: str | None = None,
                timeout: float = 120) -> CliResult:
    """Run `rtenv ARGS` as a real subprocess with this interpreter."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [sys.executable, "-m", "rtenv_cli", *args],
        input=input, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout,
        check=False,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def default_signals() -> None:
    """`preexec_fn` for children that a test signals: a background job of a non-interactive
    shell (or a CI harness) may start us with SIGINT/SIGTERM/SIGHUP ignored, and an ignored
    signal stays ignored in every child (Python then installs no KeyboardInterrupt handler)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)

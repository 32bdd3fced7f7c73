"""Progress is drawn on a terminal (stderr a tty) and never into a pipe or a file: hashing and
packaging bars for a push, a spinner while `rtenv run` prepares the environment."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_process


def _with_terminal_stderr(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run `rtenv ARGS` with stderr on a pseudo-terminal; (exit code, what the terminal got)."""
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm", COLUMNS="100")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "rtenv_cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode("utf-8", "replace")


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(200):
        (src / f"m{i}.py").write_bytes(os.urandom(20_000))
    (tmp_path / "runtime_env.yaml").write_text("working_dir: src\n")
    return tmp_path


def test_push_draws_bars_on_a_terminal_only(tmp_path: Path) -> None:
    cwd = _tree(tmp_path)
    (tmp_path / "shared").mkdir()
    code, terminal = _with_terminal_stderr(["push", "runtime_env.yaml", "--to",
                                            f"file://{tmp_path / 'shared'}"], cwd)
    assert code == 0, terminal
    assert "hashing working_dir" in terminal
    assert "packaging working_dir" in terminal
    (tmp_path / "shared2").mkdir()
    piped = run_process(["push", "runtime_env.yaml", "--to", f"file://{tmp_path / 'shared2'}"],
                        cwd=str(cwd), env={"TERM": "xterm"})
    assert piped.exit_code == 0, piped.stderr
    assert "hashing" not in piped.stderr
    assert "\x1b[" not in piped.stderr


def test_run_shows_a_spinner_while_preparing_on_a_terminal_only(tmp_path: Path) -> None:
    cwd = _tree(tmp_path)
    code, terminal = _with_terminal_stderr(["run", "-r", "runtime_env.yaml", "--", "true"], cwd)
    assert code == 0, terminal
    assert "preparing the environment" in terminal
    piped = run_process(["run", "-r", "runtime_env.yaml", "--", "true"], cwd=str(cwd))
    assert piped.exit_code == 0
    assert "preparing" not in piped.stderr

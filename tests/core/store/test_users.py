"""store/users.py: which directories live processes use (cwd, VIRTUAL_ENV, PYTHONPATH), read
from real processes' /proc entries."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtenv_cli.core.store.users import in_use


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    out = {name: tmp_path / name for name in ("cwd", "venv", "mods", "idle")}
    for path in out.values():
        (path / "sub").mkdir(parents=True)
    return out


def _sleeper(cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process that waits on its stdin: alive until the test closes it."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            cwd=cwd, env={**os.environ, **env}, stdin=subprocess.PIPE)


@pytest.fixture
def proc(dirs: dict[str, Path]) -> Iterator[subprocess.Popen[bytes]]:
    p = _sleeper(dirs["cwd"] / "sub", {"VIRTUAL_ENV": str(dirs["venv"]),
                                         "PYTHONPATH": f"{dirs['mods']}/sub{os.pathsep}/x"})
    try:
        yield p
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=60)


def test_a_live_process_uses_its_cwd_venv_and_pythonpath_and_their_parents(
        dirs: dict[str, Path], proc: subprocess.Popen[bytes]) -> None:
    paths = [str(p) for p in dirs.values()]
    assert in_use(paths) == {str(dirs[n]) for n in ("cwd", "venv", "mods")}


def test_nothing_is_in_use_once_the_process_exited(dirs: dict[str, Path],
                                                    proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=60)
    assert in_use([str(p) for p in dirs.values()]) == set()


def test_no_paths_asked_none_used() -> None:
    assert in_use([]) == set()

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


def test_a_node_gc_keeps_an_unreferenced_entry_a_live_process_uses(tmp_path: Path) -> None:
    from rtenv_cli.core.cache.gc import plan_gc
    from rtenv_cli.core.cache.ray_store import kept_in_use
    from rtenv_cli.core.store.store import Store

    store = Store(tmp_path / "store")
    try:
        for key in ("used", "idle"):
            store.get_or_build(key, kind="pip", uri=f"pip://{key}", label=key,
                               build=lambda tree: (tree / "venv").mkdir())
        venv = store.root / store.index.get("used").path / "tree" / "venv"  # type: ignore[union-attr]
        p = _sleeper(tmp_path, {"VIRTUAL_ENV": str(venv)})
        try:
            plan = plan_gc(kept_in_use(store), purge=True)
            assert [e.key for e in plan.remove] == ["idle"]
        finally:
            assert p.stdin is not None
            p.stdin.close()
            p.wait(timeout=60)
        assert sorted(e.key for e in plan_gc(kept_in_use(store), purge=True).remove) == [
            "idle", "used"]
    finally:
        store.close()

"""The resident server's warm-up: a push forked from it imports nothing of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.packages import make_tree
from tests.support.ray_head import RayHead

# rtenv's modules and the dependencies a push imports: each must come warm from the server
HEAVY = ("rtenv_cli", "requests", "urllib3", "h2", "hpack", "hyperframe", "yaml", "sqlite3",
         "charset_normalizer", "idna", "certifi", "email", "http")
PROBE = """
import json, sys, io, contextlib
from rtenv_cli.resident.server import warm
warm()
before = set(sys.modules)
from rtenv_cli.cli.main import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "new": sorted(set(sys.modules) - before)}))
"""


def _new_imports(args: list[str], cwd: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["code"] == 0, proc.stderr
    return [m for m in result["new"] if m.split(".")[0] in HEAVY]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "proj", {"main.py": "print('hi')\n", "pkg/mod.py": "X = 1\n"})


def test_a_push_to_the_local_store_imports_nothing_afresh(project: Path) -> None:
    assert _new_imports(["push", "."], project) == []


def test_a_push_to_a_shared_directory_imports_nothing_afresh(project: Path,
                                                              tmp_path: Path) -> None:
    assert _new_imports(["push", ".", "--to", f"file://{tmp_path / 'shared'}"], project) == []


@pytest.mark.ray
def test_a_push_to_a_ray_cluster_imports_nothing_afresh(project: Path,
                                                        ray_cluster: RayHead) -> None:
    """Ray's zip path, by GCS address and by dashboard URL (the tree path needs the plugin's
    nodes: benchmarks/bench_trees.py pushes through the daemon there)."""
    for address in (ray_cluster.address, ray_cluster.dashboard_url):
        assert _new_imports(["push", ".", "--address", address], project) == [], address

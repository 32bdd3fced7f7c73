"""lint/patterns.py: which excludes patterns can never match, and which repeat Ray's defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.lint.patterns import default_covered, never_matches
from rtenv_cli.core.packaging.packscan import pattern_matcher

TREE = ["main.py", "app.log", "node_modules/", "node_modules/x.js", "outputs/", "data/d.csv",
        "data/"]


@pytest.mark.parametrize(("pattern", "fix"), [
    (".log", "*.log"), ("**/.log", "**/*.log"), (".ckpt", "*.ckpt"),  # a known extension
    ("/.node_modules/", "/node_modules/"), (".outputs", "outputs"),
    ("./outputs", "/outputs"), ("./data/", "/data/"), ("a//b", "a/b"), ("/a/./b/", "/a/b/"),
    ("logs\\old", "logs/old"), ("../data", None), ("~/cache", None), ("/", None),
])
def test_can_never_match(pattern: str, fix: str | None) -> None:
    dead = never_matches(pattern, TREE, [])
    assert dead is not None
    assert dead.fix == fix


@pytest.mark.parametrize("pattern", [
    "outputs/", "checkpoints/", "*.ckpt", "wandb", "/data/", "!keep.py", "# comment", "",
    ".env", ".cache/", ".github/", ".DS_Store", ".git", "**/*.tmp", "data\\*",  # escaped glob
    "/tmp/",  # one component: an anchored pattern, not a path of this machine
    ".weird",  # no file ends in `.weird`, and no folder `weird`: meant as written
])
def test_can_match_later(pattern: str) -> None:
    assert never_matches(pattern, TREE, []) is None


def test_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "proj" / "data").mkdir(parents=True)
    inside = never_matches(f"{tmp_path}/proj/data/", [], [tmp_path / "proj"])
    assert inside is not None
    assert inside.fix == "/data/"
    elsewhere = never_matches(str(tmp_path), [], [tmp_path / "proj"])
    assert elsewhere is not None
    assert elsewhere.fix is None


@pytest.mark.parametrize(("pattern", "default"), [
    (".git", ".git"), (".git/", ".git"), ("/.git", ".git"), ("**/.git/**", ".git"),
    ("__pycache__", "__pycache__"), ("**/__pycache__/", "__pycache__"), ("venv", "venv"),
    (".venv/", ".venv"), ("*venv*", ".venv"),
    ("*.pyc", None), ("outputs/", None), ("*.log", None),
])
def test_default_covered(pattern: str, default: str | None) -> None:
    defaults = [".git", ".venv", "venv", "__pycache__"]
    assert default_covered(pattern_matcher(pattern), defaults) == default
    assert default_covered(pattern_matcher(pattern), []) is None  # RAY_OVERRIDE_..._EXCLUDES=""

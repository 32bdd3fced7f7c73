from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.watch.filters import IgnoreRules, is_dependency_file, is_ephemeral


@pytest.mark.parametrize("rel", [
    "4913", "a/4913", "a.py~", ".a.py.swp", "sub/.main.py.swx", ".#main.py", "#main.py#",
    "main.py___jb_tmp___", "main.py___jb_old___", ".DS_Store", "x/.DS_Store", ".git/index",
    "pkg/__pycache__/m.cpython-311.pyc", "flymake_x.py", ".kate-swp", "sedAbC123",
])
def test_editor_and_temp_files_are_ephemeral(rel: str) -> None:
    assert is_ephemeral(rel)


@pytest.mark.parametrize("rel", ["main.py", "a/b/c.txt", "4913.py", "notes.md", "sed.py",
                                 "gitfile", "src/swp.py"])
def test_real_files_are_not_ephemeral(rel: str) -> None:
    assert not is_ephemeral(rel)


def test_ignore_rules_follow_ray(tmp_path: Path) -> None:
    (tmp_path / "sub" / "deep").mkdir(parents=True)
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "sub" / ".rayignore").write_text("secret/\ndata.bin\n")
    rules = IgnoreRules(tmp_path, excludes=["build"])
    assert rules.is_ignored("x.log")
    assert rules.is_ignored("sub/deep/y.log")
    assert rules.is_ignored("sub/data.bin")
    assert not rules.is_ignored("data.bin")  # .rayignore in sub/ applies below sub/ only
    assert rules.is_ignored("build/out.py")  # excludes
    assert rules.is_ignored(".venv/lib/x.py")  # Ray's default excludes for working_dir
    assert not rules.is_ignored("sub/deep/main.py")
    # ignore files are re-read when they change
    (tmp_path / ".gitignore").write_text("*.txt\n")
    assert rules.is_ignored("a.txt")
    assert not rules.is_ignored("x.log")


def test_py_module_has_no_default_excludes(tmp_path: Path) -> None:
    assert not IgnoreRules(tmp_path, kind="py_module").is_ignored(".venv/x.py")


def test_gitignore_switch(tmp_path: Path) -> None:
    (tmp_path / ".gitignore").write_text("*.log\n")
    rules = IgnoreRules(tmp_path, env={"RAY_RUNTIME_ENV_IGNORE_GITIGNORE": "1"})
    assert not rules.is_ignored("x.log")


@pytest.mark.parametrize(("rel", "dep"), [
    ("requirements.txt", True), ("requirements-dev.txt", True),
                                          ("pyproject.toml", True), ("uv.lock", True),
                                          ("environment.yml", True), ("main.py", False)])
def test_dependency_files(rel: str, dep: bool) -> None:
    assert is_dependency_file(rel) is dep

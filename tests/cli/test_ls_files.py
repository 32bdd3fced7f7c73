"""`rtenv ls-files` given a runtime_env file lists its packages' files, with its excludes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli


def test_ls_files_of_a_runtime_env_lists_its_packages(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("X = 1\n")
    (tmp_path / "src" / "run.log").write_text("noise\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("Y = 1\n")
    (tmp_path / "runtime_env.yaml").write_text("working_dir: src\nexcludes: ['*.log']\n")
    one = run_cli(["ls-files", "runtime_env.yaml"])
    assert one.exit_code == 0, one.stderr
    assert one.stdout.splitlines() == ["main.py"]  # the package's files, excludes applied
    (tmp_path / "runtime_env.yaml").write_text("working_dir: src\npy_modules: [lib]\n")
    both = run_cli(["ls-files", "runtime_env.yaml", "--format", "json"])
    assert both.exit_code == 0, both.stderr
    listed = {p["field"]: [e["path"] for e in p["entries"]] for p in both.json["packages"]}
    assert listed == {"working_dir": ["main.py", "run.log"], "py_modules[0]": ["__init__.py"]}

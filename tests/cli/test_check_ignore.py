"""`rtenv check-ignore -r runtime_env.yaml` decides each path as that file's push would: by the
package the path lies in (working_dir or a py_module), with the file's `excludes`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src" / "configs").mkdir(parents=True)
    (tmp_path / "src" / "train.py").write_text("X = 1\n")
    (tmp_path / "src" / "configs" / "sft.yaml").write_text("lr: 1\n")
    (tmp_path / "src" / "run.log").write_text("noise\n")
    (tmp_path / "libs" / "helper").mkdir(parents=True)
    (tmp_path / "libs" / "helper" / "__init__.py").write_text("Y = 1\n")
    (tmp_path / "libs" / "helper" / "notes.yaml").write_text("a: 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "blob.bin").write_bytes(b"x")
    (tmp_path / "runtime_env.yaml").write_text(
        "working_dir: src\npy_modules: [libs/helper]\nexcludes: ['*.log', '*.yaml']\n")
    return tmp_path


def test_check_ignore_takes_the_runtime_envs_packages_and_excludes(project: Path) -> None:
    result = run_cli(["check-ignore", "-v", "-n", "-r", "runtime_env.yaml", "src/run.log",
                      "src/train.py", "libs/helper/notes.yaml", "libs/helper/__init__.py",
                      "data/blob.bin"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "excludes[0]:*.log\tsrc/run.log",  # working_dir's excludes
        "::\tsrc/train.py",
        "excludes[1]:*.yaml\tlibs/helper/notes.yaml",  # the py_module gets them too, as in Ray
        "::\tlibs/helper/__init__.py",
        "outside working_dir and py_modules\tdata/blob.bin",  # in no package at all
    ]


def test_the_ls_files_and_check_ignore_of_a_runtime_env_agree(project: Path) -> None:
    listed = run_cli(["ls-files", "runtime_env.yaml", "--format", "json"])
    assert listed.exit_code == 0, listed.stderr
    shipped = {str(Path(p["root"]).relative_to(project) / e["path"])
               for p in listed.json["packages"] for e in p["entries"] if not e["is_dir"]}
    every = sorted(str(p.relative_to(project)) for p in project.rglob("*") if p.is_file())
    decided = run_cli(["check-ignore", "-r", "runtime_env.yaml", "-f", "json", *every])
    assert decided.exit_code == 0, decided.stderr
    assert {d["path"] for d in decided.json["paths"] if not d["ignored"]} == shipped


def test_root_and_runtime_env_together_is_a_usage_error(project: Path) -> None:
    result = run_cli(["check-ignore", "-r", "runtime_env.yaml", "--root", "src", "src/x"])
    assert result.exit_code == 2
    assert "--root" in result.stderr

"""`rtenv push --rtenv-envs`: pip/uv move into the `rtenv` field of rtenv's Ray plugin."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.support.cli import run_cli


def test_pip_list_and_requirements_file_become_rtenv(tmp_path: Path) -> None:
    (tmp_path / "reqs.txt").write_text("six==1.16.0\nattrs\n")
    env = tmp_path / "runtime_env.yaml"
    env.write_text("env_vars: {A: '1'}\nuv: {packages: reqs.txt, uv_check: true}\n")
    out = tmp_path / "pushed.json"
    result = run_cli(["push", str(env), "--rtenv-envs", "--base-dir", str(tmp_path),
                      "--to", f"file://{tmp_path / 'pkgs'}", "-o", str(out)])
    assert result.exit_code == 0, result.stderr
    pushed = json.loads(out.read_text())
    assert pushed == {"env_vars": {"A": "1"},
                      "rtenv": {"uv": {"packages": ["six==1.16.0", "attrs"], "uv_check": True}}}
    env.write_text("pip: [six]\n")
    dry = run_cli(["push", str(env), "--rtenv-envs", "--dry-run"])
    assert yaml.safe_load(dry.stdout) == {"rtenv": {"pip": ["six"]}}


def test_what_cannot_be_carried_over_is_refused(tmp_path: Path) -> None:
    env = tmp_path / "runtime_env.yaml"
    env.write_text("pip: [six]\nconda: {dependencies: [numpy]}\n")
    result = run_cli(["push", str(env), "--rtenv-envs", "--dry-run"])
    assert result.exit_code == 1
    assert "runtime_env['conda'] cannot be carried over into `rtenv`" in result.stderr
    assert "hint: drop `conda`" in result.stderr
    env.write_text("pip: [six, 'ray[default]']\n")
    result = run_cli(["push", str(env), "--rtenv-envs", "--dry-run"])
    assert result.exit_code == 2
    assert "installs `ray[default]`" in result.stderr

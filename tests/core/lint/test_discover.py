"""Which files `rtenv validate DIR` finds (lint/discover.py): runtime_envs by name and by
content, never a CI workflow or a k8s manifest."""

from __future__ import annotations

from pathlib import Path

from rtenv_cli.core.lint.discover import CONTENT_MAX_BYTES, find_files
from rtenv_cli.core.lint.engine import DEFAULT_GLOBS

FILES = {
    "job_env.yaml": "working_dir: .\nenv_vars:\n  A: '1'\n",  # runtime_envs by content
    "task_env.yml": "# a comment\npip: [requests]\n",
    "deps.json": '{"pip": ["requests"], "env_vars": {"A": "1"}}',
    "plugin.yaml": "rtenv:\n  pip: [requests]\n",  # rtenv's own field counts
    "ci.yml": "name: ci\non: [push]\njobs:\n  t:\n    runs-on: ubuntu-latest\n",
    "deploy.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\n",
    "settings.yaml": "working_dir: .\nlearning_rate: 0.1\n",  # one non-field key
    "flow.json": '{"env_vars": {"A": "1"}, "kind": "x"}',
    "empty.yaml": "",
    "notes.txt": "pip: [requests]\n",
    "serve_config.yaml": "applications:\n- import_path: m:app\n",  # by name + content, as before
}


def test_runtime_envs_are_found_by_content_and_nothing_else(tmp_path: Path) -> None:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    found = [Path(p).name for p in find_files(tmp_path, DEFAULT_GLOBS, by_content=True)]
    assert found == ["deps.json", "job_env.yaml", "plugin.yaml", "serve_config.yaml",
                     "task_env.yml"]


def test_large_files_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "big.yaml").write_text("env_vars:\n" + "  A: '1'\n" * CONTENT_MAX_BYTES)
    assert find_files(tmp_path, DEFAULT_GLOBS, by_content=True) == []


def test_the_per_task_example_is_found() -> None:
    root = Path(__file__).resolve().parents[3] / "examples" / "per-task"
    found = [Path(p).name for p in find_files(root, DEFAULT_GLOBS, by_content=True)]
    assert found == ["job_env.yaml", "task_env.yaml"]

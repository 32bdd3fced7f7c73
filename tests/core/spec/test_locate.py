from __future__ import annotations

from rtenv_cli.core.spec.loader import load_text
from rtenv_cli.core.spec.locate import document_kind, find_runtime_envs


def test_bare_runtime_env() -> None:
    doc = load_text("working_dir: .\nfoo: 1\n", "f")
    assert document_kind(doc) == "runtime_env"
    assert find_runtime_envs(doc) == [((), {"working_dir": ".", "foo": 1})]
    assert find_runtime_envs(load_text("[1]", "f")) == [((), [1])]


def test_serve_config_apps() -> None:
    doc = load_text(
        "proxy_location: EveryNode\napplications:\n"
        "  - name: a\n    import_path: m:app\n    runtime_env: {pip: [x]}\n"
        "  - name: b\n    import_path: m:b\n", "serve.yaml")
    assert document_kind(doc) == "serve"
    [(prefix, env)] = find_runtime_envs(doc)
    assert prefix == ("applications", 0, "runtime_env")
    assert env == {"pip": ["x"]}
    assert doc.positions.key((*prefix, "pip")).line == 5


def test_job_spec() -> None:
    doc = load_text("entrypoint: python x.py\nruntime_env:\n  env_vars: {A: '1'}\n", "job.yaml")
    assert document_kind(doc) == "job"
    assert find_runtime_envs(doc) == [(("runtime_env",), {"env_vars": {"A": "1"}})]
    assert find_runtime_envs(load_text("entrypoint: x\nruntime_env:\n", "j")) == []

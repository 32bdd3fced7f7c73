"""`rtenv explain` for a runtime_env with the `rtenv` field: what rtenv's plugin's
`modify_context` gives the worker (its venv activated, its python as the interpreter)."""

from __future__ import annotations

from rtenv_cli.core.explain.worker_env import ExplainRequest, predict


def test_worker_sees_the_venv_first_on_path() -> None:
    req = ExplainRequest(job_runtime_env={"rtenv": {"pip": ["six==1.16.0"]},
                                          "env_vars": {"PATH": "/opt/tools:${PATH}"}},
                         node_env={"PATH": "/usr/bin:/bin", "RTENV_HOME": "/srv/rtenv",
                                   "PYTHONHOME": "/usr"},
                         node_env_known=True)
    p = predict(req)
    venv = "/srv/rtenv/store/entries/<venv key>/tree/venv"
    assert p.env["VIRTUAL_ENV"] == venv
    assert p.env["PATH"] == f"{venv}/bin:/opt/tools:/usr/bin:/bin"  # activate runs after env_vars
    assert p.env["PYTHONHOME"] is None
    assert p.python == f"{venv}/bin/python"
    assert p.sources["PATH"] == p.sources["VIRTUAL_ENV"] == "rtenv plugin"
    assert p.to_dict()["python"] == p.python
    assert not p.errors


def test_a_task_field_and_errors() -> None:
    p = predict(ExplainRequest(job_runtime_env={"env_vars": {"A": "1"}},
                               task_runtime_env={"rtenv": {"uv": ["six"]}}))
    assert p.python is not None
    assert p.python.startswith("<node's rtenv store>/")
    # Ray keeps the job's other fields under a task's: pip beside rtenv, refused by the plugin
    both = predict(ExplainRequest(job_runtime_env={"pip": ["six"]},
                                  task_runtime_env={"rtenv": {"uv": ["six"]}}))
    assert both.python is None
    assert any("sets both `rtenv` and `pip`" in e for e in both.errors)
    bad = predict(ExplainRequest(job_runtime_env={"rtenv": {"pipp": ["six"]}}))
    assert bad.python is None
    assert "VIRTUAL_ENV" not in bad.env
    assert any("unknown key 'pipp'" in e for e in bad.errors)


def test_without_the_field_nothing_changes() -> None:
    p = predict(ExplainRequest(job_runtime_env={"env_vars": {"A": "1"}}))
    assert p.python is None
    assert "python" not in p.to_dict()


def test_limits_alone_build_no_venv() -> None:
    """The plugin's modify_context activates a venv only for `pip`/`uv`: with `limits` alone
    the worker keeps the node's python and PATH (it only runs in a cgroup)."""
    p = predict(ExplainRequest(job_runtime_env={"rtenv": {"limits": {"memory": "2GB"}}},
                               node_env={"PATH": "/usr/bin:/bin"}, node_env_known=True))
    assert p.python is None
    assert "VIRTUAL_ENV" not in p.env
    assert p.env["PATH"] == "/usr/bin:/bin"
    assert not [n for ns in p.notes.values() for n in ns if "venv" in n]
    assert not p.errors

"""`rtenv explain` for Ray's pip and uv fields: the virtualenv Ray's plugin makes on the node,
its python as the worker's, activated in the worker's command prefix (interpreter.py)."""

from __future__ import annotations

import pytest

from rtenv_cli.core.explain.worker_env import ExplainRequest, predict


@pytest.mark.parametrize("field", ["pip", "uv"])
def test_the_worker_runs_the_plugins_virtualenv_python(field: str) -> None:
    p = predict(ExplainRequest(job_runtime_env={field: ["six==1.16.0"],
                                                "env_vars": {"PATH": "/opt/tools:${PATH}"}},
                               node_env={"PATH": "/usr/bin", "PYTHONHOME": "/usr"},
                               node_env_known=True))
    venv = f"<session_dir>/runtime_resources/{field}/<{field} hash>/virtualenv"
    assert p.python == f"{venv}/bin/python"
    assert p.python_source == f"ray: {field} plugin"
    assert p.to_dict()["python_source"] == p.python_source
    assert p.env["VIRTUAL_ENV"] == venv
    assert p.env["PATH"] == f"{venv}/bin:/opt/tools:/usr/bin"  # activate runs after env_vars
    assert p.env["PYTHONHOME"] is None
    assert p.sources["VIRTUAL_ENV"] == p.sources["PATH"] == p.python_source
    assert any("--system-site-packages" in n for n in p.notes["(general)"])
    assert {"VIRTUAL_ENV", "PATH"} <= p.node_only()  # a sourced file never sets them


def test_the_layout_is_rays_own() -> None:
    """The path Ray's plugins give py_executable: <resources>/<field>/<hash> + virtualenv."""
    from ray._private.runtime_env import pip as ray_pip
    from ray._private.runtime_env import uv as ray_uv
    from ray._private.runtime_env import virtualenv_utils

    resources = "/S/runtime_resources"
    for field, module in (("pip", ray_pip), ("uv", ray_uv)):
        env = {field: ["six==1.16.0"]}
        digest = module.get_uri(env).split("://", 1)[1]
        target = f"{resources}/{field}/{digest}"
        ray_python = virtualenv_utils.get_virtualenv_python(target)
        ours = predict(ExplainRequest(job_runtime_env=env)).python
        assert ours is not None
        assert ours.replace("<session_dir>", "/S").replace(f"<{field} hash>", digest) \
            == ray_python


def test_no_pip_no_uv_no_python() -> None:
    p = predict(ExplainRequest(job_runtime_env={"env_vars": {"A": "1"}}))
    assert p.python is None
    assert "VIRTUAL_ENV" not in p.env
    assert "python_source" not in p.to_dict()

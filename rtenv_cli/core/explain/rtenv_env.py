"""What rtenv's Ray plugin does to a worker with an `rtenv` field (rtenv_cli/ray_plugin.py,
`modify_context`): like Ray's pip plugin, it sets the worker's interpreter (`py_executable`) to
the venv's python and prefixes the worker's command with `source <venv>/bin/activate`, so the
worker (and a job's entrypoint) sees VIRTUAL_ENV, the venv's bin first on PATH and no
PYTHONHOME (interpreter.activate, the step Ray's pip and uv plugins take too). The activate
script runs in the worker's shell, after env_vars are applied."""

from __future__ import annotations

from collections.abc import Mapping

from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.explain.interpreter import activate
from rtenv_cli.core.spec.model import RTENV_FIELD

SRC_RTENV = "rtenv plugin"
STORE = "<node's rtenv store>"  # the plugin's store, without the node's RTENV_HOME
VENV_KEY = "<venv key>"  # the plugin's venv: its key hashes the node's interpreter


def venv_dir(node_env: Mapping[str, str]) -> str:
    """Where the node's plugin keeps the venv: its store is $RTENV_HOME/store (the raylet's
    RTENV_HOME, `rtenv ray-env`), the venv an entry named by the environment's key."""
    home = node_env.get("RTENV_HOME")
    store = f"{home.rstrip('/')}/store" if home else STORE
    return f"{store}/entries/{VENV_KEY}/tree/venv"


def apply(runtime_env: Mapping[str, object], env: dict[str, str | None], *,
          sources: dict[str, str], notes: dict[str, list[str]], errors: list[str],
          node_env: Mapping[str, str]) -> str | None:
    """Apply the plugin's activate step to `env`; returns the worker's interpreter (None when
    the runtime_env has no `rtenv` field, or one with `limits` alone: no venv then)."""
    if RTENV_FIELD not in runtime_env:
        return None
    from rtenv_cli.core.rayplugin import schema  # only for runtime_envs that use the field

    try:
        spec = schema.parse(runtime_env[RTENV_FIELD], runtime_env)
    except RtenvError as exc:
        errors.append(f"{exc.message} (the node's plugin refuses it: RuntimeEnvSetupError)")
        return None
    if spec.kind is None:  # `limits` alone: the worker only runs in a cgroup (limits.py)
        return None
    python = activate(env, venv_dir(node_env), SRC_RTENV, sources=sources, notes=notes)
    notes.setdefault("(general)", []).append(
        f"rtenv plugin: the worker runs {python} (py_executable), a venv of the node's Python "
        f"with `{spec.kind}` requirements; it imports the node's ray")
    return python

"""The python a worker runs, where a runtime_env plugin sets it (Ray 2.60.0's `py_executable`).

Without one, a worker runs the node's own interpreter (the one `ray start` runs under). Ray's
`pip` and `uv` plugins (ray/_private/runtime_env/pip.py, uv.py: `modify_context`) set it to
`<target>/virtualenv/bin/python`, target being `<session_dir>/runtime_resources/<pip|uv>/<hash>`
(the hash of the requirements: `pip.get_uri`, `uv.get_uri`), and prefix the worker's command
with `source <target>/virtualenv/bin/activate` (virtualenv_utils.py). That virtualenv is made by
`create_or_get_virtualenv`: when the node's Python itself runs in a virtualenv, a copy of that
virtualenv (`virtualenv-clone`, ray/_private/runtime_env/_clonevirtualenv.py), else
`virtualenv --system-site-packages` over the node's Python; either way the node's packages, ray
among them, stay importable and the requirements are installed over them. rtenv's plugin
(rtenv_env.py) does the same with a venv of its store.

`activate` is the step both share: what the activate script does to the worker's environment.
"""

from __future__ import annotations

from collections.abc import Mapping

SESSION = "<session_dir>"  # the node's live Ray session directory (known only on the node)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RAY_VENV_FIELDS = ("pip", "uv")  # Ray's plugins that give a worker a virtualenv
HASH = "<{field} hash>"  # the requirements' hash: Ray's get_uri, computed on the node


def activate(env: dict[str, str | None], venv: str, source: str, *,
             sources: dict[str, str], notes: dict[str, list[str]]) -> str:
    """Apply `source <venv>/bin/activate` (the worker's command prefix) to `env`: VIRTUAL_ENV,
    the venv's bin first on PATH, no PYTHONHOME. Returns the venv's python."""
    env["VIRTUAL_ENV"] = venv
    sources["VIRTUAL_ENV"] = source
    before = env.get("PATH")
    env["PATH"] = f"{venv}/bin:{before if before is not None else DEFAULT_PATH}"
    notes.setdefault("PATH", []).append(
        "the venv's bin prepended by `source <venv>/bin/activate` (the worker's command prefix)"
        + ("" if before is not None else "; the rest: the shell's default PATH (node env "
           "not given)"))
    sources["PATH"] = source
    if env.get("PYTHONHOME") is not None:
        env["PYTHONHOME"] = None
        sources["PYTHONHOME"] = source
        notes.setdefault("PYTHONHOME", []).append("unset by the venv's activate script")
    return f"{venv}/bin/python"


def ray_venv(runtime_env: Mapping[str, object], env: dict[str, str | None], *,
             sources: dict[str, str], notes: dict[str, list[str]]) -> tuple[str, str] | None:
    """Ray's pip or uv plugin's virtualenv, activated in `env`: (the worker's python, its
    source); None when the runtime_env has neither field."""
    field = next((f for f in RAY_VENV_FIELDS if runtime_env.get(f)), None)
    if field is None:
        return None
    source = f"ray: {field} plugin"
    venv = f"{SESSION}/runtime_resources/{field}/{HASH.format(field=field)}/virtualenv"
    python = activate(env, venv, source, sources=sources, notes=notes)
    notes.setdefault("(general)", []).append(
        f"{field}: the worker runs {python} (py_executable), a virtualenv Ray made on the node "
        "for these requirements: a clone of the node's virtualenv when `ray start` runs in one, "
        "else `virtualenv --system-site-packages` over the node's Python; the node's packages "
        "(ray among them) stay importable, the requirements installed over them")
    return python, source

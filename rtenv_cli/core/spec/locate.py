"""Find the runtime_env(s) inside a loaded document (runtime_env_file.py reads the one of a file).

Three shapes are recognised:
- a bare runtime_env (what `ray job submit --runtime-env FILE` reads): prefix `()`;
- a Ray Serve config: `applications[i].runtime_env`, prefix `("applications", i, "runtime_env")`;
- a job spec (`entrypoint:` + `runtime_env:`, or a mapping whose only runtime_env-looking key is
  `runtime_env`): prefix `("runtime_env",)`.
The prefix lets callers look up positions in the outer file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.spec.loader import LoadedDoc
from rtenv_cli.core.spec.model import ALL_TOP_LEVEL_KEYS

DocKind = Literal["runtime_env", "serve", "job"]
DEFAULT_FILE = "runtime_env.yaml"  # what every command reads when given no file

# ServeDeploySchema's fields (Ray Serve 2.60.0; lint/serve_structure.py's LEVELS["config"])
_SERVE_KEYS = frozenset({"applications", "proxy_location", "http_options", "grpc_options",
                         "logging_config", "target_capacity", "controller_options",
                         "tracing_config"})


def default_file(cwd: Path | None = None) -> Path | None:
    """`./runtime_env.yaml` when the directory holds one: the file validate, doctor, push,
    explain and run take when given none (None: there is none)."""
    path = (Path.cwd() if cwd is None else cwd) / DEFAULT_FILE
    return Path(DEFAULT_FILE) if path.is_file() else None


def _data(doc: LoadedDoc | object) -> object:
    return doc.data if isinstance(doc, LoadedDoc) else doc


def document_kind(doc: LoadedDoc | object) -> DocKind:
    data = _data(doc)
    if not isinstance(data, dict):
        return "runtime_env"
    keys = {k for k in data if isinstance(k, str)}
    if keys & ALL_TOP_LEVEL_KEYS:
        return "runtime_env"  # any real runtime_env field: a bare runtime_env
    if isinstance(data.get("applications"), list) and keys <= _SERVE_KEYS | {"runtime_env"}:
        return "serve"
    if "runtime_env" in data and (
        "entrypoint" in data or isinstance(data["runtime_env"], dict) or
        data["runtime_env"] is None
    ):
        return "job"
    return "runtime_env"


def find_runtime_envs(doc: LoadedDoc | object) -> list[tuple[tuple[Any, ...], object]]:
    """`[(json_path_prefix, runtime_env), ...]` in document order.

    A bare document is returned as is, whatever its type (Ray's shape checks apply to it); nested
    runtime_envs that are absent or null are skipped (Ray treats them as "no runtime_env").
    """
    data = _data(doc)
    kind = document_kind(data)
    if kind == "serve":
        found: list[tuple[tuple[Any, ...], object]] = []
        for index, app in enumerate(data["applications"]):  # type: ignore[index]
            if isinstance(app, dict) and app.get("runtime_env") is not None:
                found.append((("applications", index, "runtime_env"), app["runtime_env"]))
        return found
    if kind == "job":
        value = data["runtime_env"]  # type: ignore[index]
        return [] if value is None else [(("runtime_env",), value)]
    return [((), data)]


def serve_app(name: str, applications: list[object], app: str | None
               ) -> tuple[tuple[Any, ...], object]:
    """(prefix, runtime_env) of one application of a Serve config (`serve deploy` file): the one
    named `app`, or the only one."""
    apps = [(i, a) for i, a in enumerate(applications) if isinstance(a, dict)]
    names = [str(a.get("name", "default")) for _i, a in apps]  # Serve's default app name
    listed = ", ".join(names) or "none"
    if app is None:
        if len(apps) != 1:
            raise UsageError(f"{name} is a Serve config with {len(apps)} applications",
                             path=name, hint=f"pick one with --app NAME ({listed}), or write "
                             "its runtime_env to a file of its own")
        index, chosen = apps[0]
    else:
        matches = [(i, a) for (i, a), n in zip(apps, names, strict=True) if n == app]
        if not matches:
            raise UsageError(f"{name}: no Serve application named {app!r}", path=name,
                             hint=f"the applications are: {listed}")
        index, chosen = matches[0]
    return ("applications", index, "runtime_env"), chosen.get("runtime_env")

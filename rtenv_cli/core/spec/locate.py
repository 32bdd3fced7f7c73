"""Find the runtime_env(s) inside a loaded document.

Three shapes are recognised:
- a bare runtime_env (what `ray job submit --runtime-env FILE` reads): prefix `()`;
- a Ray Serve config: `applications[i].runtime_env`, prefix `("applications", i, "runtime_env")`;
- a job spec (`entrypoint:` + `runtime_env:`, or a mapping whose only runtime_env-looking key is
  `runtime_env`): prefix `("runtime_env",)`.
The prefix lets callers look up positions in the outer file.
"""

from __future__ import annotations

from typing import Any, Literal

from rtenv_cli.core.spec.loader import LoadedDoc
from rtenv_cli.core.spec.model import ALL_TOP_LEVEL_KEYS

DocKind = Literal["runtime_env", "serve", "job"]

_SERVE_KEYS = frozenset({"applications", "proxy_location", "http_options", "grpc_options",
                         "logging_config", "target_capacity"})


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

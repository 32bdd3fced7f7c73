"""`rtenv push --rtenv-envs`: a runtime_env's `pip:`/`uv:` field moved into `rtenv:`, so Ray's
nodes build it with rtenv's plugin (schema.py) instead of Ray's pip/uv plugins.

The value carries over as it is (the plugin takes what Ray's `pip`/`uv` fields take), except a
local requirements file: Ray's driver reads it into a list before submitting, while the plugin
reads a file on the node, so it is inlined here the same way (`text.strip().split("\\n")`).
A field the plugin cannot honour beside it (conda, py_executable, container, image_uri) is
refused: there is nothing to carry it into.

`inline_files` is the same reading for any pushed runtime_env (`push -o`): every local file Ray's
driver reads at submit is replaced by its content, so the pushed file works from any directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import UnsupportedError, ValidationError
from rtenv_cli.core.rayplugin import schema


def to_rtenv(runtime_env: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    """`runtime_env` with its `pip`/`uv` field as `rtenv: {pip|uv: ...}` (unchanged without
    one); relative requirements files resolve against `base_dir`."""
    env = dict(runtime_env)
    if schema.FIELD in env:
        schema.parse(env[schema.FIELD], env)
        return env
    kinds = [k for k in schema.KINDS if env.get(k) is not None]
    if not kinds:
        return env
    if len(kinds) > 1:
        raise ValidationError("runtime_env sets both `pip` and `uv`",
                              hint="keep one of them before moving it into `rtenv`", path="uv")
    other = [f for f in schema.CONFLICTS if f not in schema.KINDS and env.get(f)]
    if other:
        raise UnsupportedError(
            f"runtime_env['{other[0]}'] cannot be carried over into `{schema.FIELD}`: rtenv's "
            "plugin builds pip/uv requirements in a venv of the node's Python",
            hint=f"drop `{other[0]}`, or push without --rtenv-envs", path=other[0])
    kind = kinds[0]
    value = inline_requirements(env[kind], base_dir, kind)
    inner = {kind: value}
    spec = schema.parse(inner, {k: v for k, v in env.items() if k != kind})
    ray = schema.ray_requirement(_listed(spec.value))
    if ray is not None:
        raise ValidationError(f"runtime_env['{kind}'] installs `{ray}`: rtenv's plugin refuses "
                              "it (a worker must import the node's own Ray)",
                              hint="remove `ray` from the requirements", path=kind)
    return {(schema.FIELD if k == kind else k): (inner if k == kind else v)
            for k, v in env.items()}


def inline_requirements(value: Any, base_dir: Path, kind: str) -> Any:
    """A `pip:`/`uv:` value with its local requirements file (the value, or its `packages`)
    read into a list as Ray's driver reads it; any other value as it is."""
    if isinstance(value, str):
        return _read(value, base_dir, kind)
    if isinstance(value, Mapping) and isinstance(value.get("packages"), str):
        return {**value, "packages": _read(value["packages"], base_dir, kind)}
    return value


def _read(name: str, base_dir: Path, kind: str) -> list[str]:
    if name.startswith(schema.WORKING_DIR_VAR):
        raise ValidationError(f"runtime_env['{kind}']: {name} names a file on the node",
                              hint="write the requirements file's local path", path=kind)
    return _text(name, base_dir, kind).strip().split("\n")


def _text(name: str, base_dir: Path, kind: str) -> str:
    path = Path(name).expanduser()
    path = path if path.is_absolute() else base_dir / path
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"runtime_env['{kind}']: cannot read {name}: {exc.strerror}",
                              hint="give the file's path relative to --base-dir "
                              "(default: the current directory)", path=kind) from None


def inline_files(runtime_env: Mapping[str, Any], base_dir: Path
                 ) -> tuple[dict[str, Any], list[tuple[tuple[str, ...], str]]]:
    """`runtime_env` with every local file Ray's driver reads at submit (a `pip`/`uv`
    requirements file, a conda YAML file, and the same in `rtenv:`) replaced by its content, so
    the runtime_env means the same from any directory (`push -o`); and `[(json path, file)]`
    of what was inlined. Relative names resolve against `base_dir`."""
    env = dict(runtime_env)
    done: list[tuple[tuple[str, ...], str]] = []
    holders: list[tuple[tuple[str, ...], dict[str, Any]]] = [((), env)]
    if isinstance(env.get(schema.FIELD), Mapping):
        env[schema.FIELD] = dict(env[schema.FIELD])
        holders.append(((schema.FIELD,), env[schema.FIELD]))
    for at, holder in holders:
        for kind in schema.KINDS:
            value = holder.get(kind)
            name = value if isinstance(value, str) else (
                value.get("packages") if isinstance(value, Mapping) else None)
            if isinstance(name, str) and at and name.startswith(schema.WORKING_DIR_VAR):
                continue  # rtenv's plugin reads it on the node, in the job's working_dir
            if isinstance(name, str):
                holder[kind] = inline_requirements(value, base_dir, kind)
                done.append(((*at, kind), name))
    conda = env.get("conda")
    if isinstance(conda, str) and Path(conda).suffix in (".yaml", ".yml"):
        import yaml

        text = _text(conda, base_dir, "conda")
        try:
            env["conda"] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValidationError(f"runtime_env['conda']: cannot read {conda}: {exc}",
                                  hint="fix the conda YAML file", path="conda") from None
        done.append((("conda",), conda))
    return env, done


def _listed(value: Any) -> list[str]:
    if isinstance(value, Mapping):
        value = value.get("packages")
    return [str(v) for v in value] if isinstance(value, list) else []

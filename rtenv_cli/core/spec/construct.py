"""`RuntimeEnv(**d)` followed by `.to_dict()`, re-implemented so that every error is collected.

Ray stops at the first error; we run each stage on what is still checkable and record all of
them, in Ray's order, so `errors[0]` is the one Ray would raise.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from rtenv_cli.core.spec import model
from rtenv_cli.core.spec import normalize as n

_INIT_PARAMS = frozenset(model.INIT_PARAM_ORDER)

# which of Ray's entry points a runtime_env goes through
Api = Literal["job-submit", "ray-init"]


@dataclass(frozen=True)
class RaySemantics:
    """How Ray reads a runtime_env in one call, as one value: the entry point (`ray job submit`
    or `ray.init`), the directory relative paths resolve against (Ray: the CWD) and the
    submitting process's environment. `ValidateOptions.semantics` builds it; the pipeline and
    the construction step read it, nothing else decides what Ray does."""

    base_dir: Path
    api: Api = "job-submit"
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def other(self) -> RaySemantics:
        """The same call through the other entry point (RTE009 compares them)."""
        return replace(self, api="ray-init" if self.api == "job-submit" else "job-submit")


@dataclass
class Constructed:
    normalized: dict[str, Any]
    errors: list[n.RuntimeEnvValueError] = field(default_factory=list)


def _parsers(base_dir: Path) -> dict[str, Callable[[Any, tuple[Any, ...]], Any]]:
    """One pass of each field parser of OPTION_TO_VALIDATION_FN (`config` handled apart)."""
    return {
        "py_modules": lambda v, p: n.normalize_py_modules(v, base_dir, p),
        "working_dir": lambda v, p: n.normalize_working_dir(v, base_dir, p),
        "excludes": n.normalize_excludes,
        "conda": lambda v, p: n.conda_once(v, base_dir, p),
        "pip": lambda v, p: n.pip_once(v, base_dir, p),
        "uv": lambda v, p: n.uv_once(v, base_dir, p),
        "env_vars": n.normalize_env_vars,
        "container": lambda v, p: v,
        "config": n.normalize_config,
    }


def _truthy(value: object) -> bool:
    try:
        return bool(value)
    except Exception:  # exotic objects whose bool() fails: Ray fails too; treat as set
        return True


def init_dict(d: Mapping[str, Any]) -> dict[str, Any]:
    """The dict `RuntimeEnv.__init__` starts from: **kwargs in file order, then the named
    parameters that are not None, in signature order (nsight -> _nsight, rocprof_sys ->
    _rocprof_sys; an existing `_nsight` key keeps its place and takes the new value)."""
    rt = {k: v for k, v in d.items() if k not in _INIT_PARAMS and k != "_validate"}
    for name in model.INIT_PARAM_ORDER:
        value = d.get(name)
        if value is not None:
            rt[model.RENAMED.get(name, name)] = value
    return rt


def construct(
    d: Mapping[str, Any], ray: RaySemantics, *, allow_local_paths: bool = False,
    prefix: tuple[Any, ...] = (), to_dict: bool = True,
) -> Constructed:
    """`RuntimeEnv(**d)`, `_validate_no_local_paths`, `.to_dict()`, in that order.

    `d` must be a dict with str keys and no `self` key (the caller reports those shape errors).
    Error paths are prefixed with `prefix` (where the runtime_env sits in its file).
    """
    fields = _FieldParsers(_parsers(ray.base_dir), prefix)
    rt = init_dict(d)
    validate = _truthy(d.get("_validate", True))
    if validate:
        _init_validate(rt, fields, ray.env)
    if not allow_local_paths:
        _no_local_paths(rt, fields.errors, prefix)
    if not to_dict:  # e.g. RuntimeEnv.serialize(): one constructor pass, no deepcopy
        return Constructed(copy.deepcopy(rt), fields.errors)
    return Constructed(_to_dict(rt, fields, validate=validate), fields.errors)


class _FieldParsers:
    """Ray's per-field parsers, run with their errors collected (and the fields that failed)."""

    def __init__(self, parsers: Mapping[str, Any], prefix: tuple[Any, ...]) -> None:
        self.parsers, self.prefix = parsers, prefix
        self.errors: list[n.RuntimeEnvValueError] = []
        self.failed: set[str] = set()

    def run(self, option: str, value: Any) -> tuple[bool, Any]:
        try:
            return True, self.parsers[option](value, (*self.prefix, option))
        except n.RuntimeEnvValueError as exc:
            self.errors.append(exc)
            self.failed.add(option)
            return False, None


def _init_validate(rt: dict[str, Any], fields: _FieldParsers, env: Mapping[str, str]) -> None:
    """What `RuntimeEnv.__init__` does with `_validate` on: the cross-field checks, each
    field's parser in Ray's order, then the fields it implies."""
    _cross_field(rt, fields.errors, fields.prefix)
    for option in model.VALIDATED_ORDER:
        value = rt.get(option)
        if value is None:
            continue
        del rt[option]
        ok, result = fields.run(option, value)
        if ok and result is not None:
            rt[option] = result
    if "_ray_commit" not in rt and (_truthy(rt.get("pip")) or _truthy(rt.get("conda"))):
        rt["_ray_commit"] = model.RAY_COMMIT
    if "_inject_current_ray" not in rt and "RAY_RUNTIME_ENV_LOCAL_DEV_MODE" in env:
        rt["_inject_current_ray"] = True
    if all(v is None for v in rt.values()):
        rt.clear()


def _to_dict(rt: Mapping[str, Any], fields: _FieldParsers, *, validate: bool) -> dict[str, Any]:
    """`RuntimeEnv.to_dict()`: its deepcopy re-runs __setitem__, i.e. every field parser, on
    every key."""
    out: dict[str, Any] = {}
    for key, value in rt.items():
        if key not in fields.parsers or key in fields.failed:
            out[key] = copy.deepcopy(value)
            continue
        if key == "config" and validate:
            out[key] = value  # already a RuntimeEnvConfig: returned as is
            continue
        if value is None:
            fields.errors.append(n.RuntimeEnvValueError(
                f"runtime_env['{key}'] is null: Ray's {key} parser asserts a value when "
                "to_dict() re-validates the runtime_env", (*fields.prefix, key),
                python_type="AssertionError"))
            continue
        ok, result = fields.run(key, copy.deepcopy(value))
        if ok and result is not None:
            out[key] = result
    return out


def _cross_field(rt: dict[str, Any], errors: list[n.RuntimeEnvValueError],
                 prefix: tuple[Any, ...]) -> None:
    managers = [k for k in MANAGERS if rt.get(k) is not None]
    if len(managers) > 1:
        errors.append(n.RuntimeEnvValueError(
            f"{_MANAGERS_MESSAGE} (specified: {', '.join(managers)})",
            (*prefix, managers[1]), python_type="ValueError", check="conflict",
            hint="keep one; to use pip with conda, list the pip packages inside the conda env"))
    for name, allowed in model.ONLY_WITH.items():
        if _truthy(rt.get(name)):
            invalid = sorted(set(rt) - allowed)
            if invalid:
                others = " and ".join(sorted(allowed - {name}))
                errors.append(n.RuntimeEnvValueError(
                    f"The '{name}' field currently cannot be used together with other fields of "
                    f"runtime_env. Specified fields: {{{', '.join(map(repr, invalid))}}}",
                    (*prefix, invalid[0]), python_type="ValueError", check="conflict",
                    hint=f"only {others} may accompany {name}"))


_MANAGERS_MESSAGE = ("The 'pip' field, 'uv' field, and 'conda' field of runtime_env cannot be "
                     "specified at the same time")
# the package managers of the field table, in the order Ray's message names them
MANAGERS = sorted(model.MANAGERS, key=lambda m: _MANAGERS_MESSAGE.find(f"'{m}'"))


def _no_local_paths(rt: dict[str, Any], errors: list[n.RuntimeEnvValueError],
                    prefix: tuple[Any, ...]) -> None:
    """`_validate_no_local_paths`: after packaging, working_dir/py_modules must be URIs."""
    wd = rt.get("working_dir")
    if _truthy(wd):
        path = (*prefix, "working_dir")
        if not isinstance(wd, str):
            errors.append(n.RuntimeEnvValueError(
                f"`working_dir` must be a string, got {type(wd)}.", path, python_type="TypeError"))
        else:
            _uri_only(wd, "working_dir", path, errors)
    mods = rt.get("py_modules")
    if _truthy(mods):
        path = (*prefix, "py_modules")
        if not isinstance(mods, list):
            errors.append(n.RuntimeEnvValueError(
                f"`py_modules` must be a list of strings, got {type(mods)}.", path,
                python_type="TypeError"))
            return
        for index, mod in enumerate(mods):
            if not isinstance(mod, str):
                errors.append(n.RuntimeEnvValueError(
                    f"`py_module` must be a string, got {type(mod)}.", (*path, index),
                    python_type="TypeError"))
                return
            _uri_only(mod, "py_modules", (*path, index), errors)


def _uri_only(uri: str, field_name: str, path: tuple[Any, ...],
              errors: list[n.RuntimeEnvValueError]) -> None:
    try:
        n.validate_uri(uri, field_name, path)
    except n.RuntimeEnvValueError as exc:
        if exc.json_path and not any(e.json_path == exc.json_path for e in errors):
            errors.append(exc)


def normalize_runtime_env(d: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """What `RuntimeEnv(**d).to_dict()` returns, local working_dir/py_modules paths untouched.

    Raises the first `RuntimeEnvValueError` in Ray's order. Use
    `construct` to get every error at once.
    """
    result = construct(d, RaySemantics(Path(base_dir)), allow_local_paths=True)
    if result.errors:
        raise result.errors[0]
    return result.normalized

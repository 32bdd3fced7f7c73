"""Ray 2.60.0's client -> server -> driver path for one runtime_env, every error collected.

`run_pipeline(data, ray)` follows `ray job submit` (`ray.api` "job-submit") or `ray.init`
("ray-init") stage by stage: shape, packaging of local working_dir/py_modules (URIs from
`rtenv_cli.core.packaging`, the same as `rtenv push`), the setup hook,
`RuntimeEnv(...)` + `_validate_no_local_paths` + `to_dict()`, JSON encoding, and the checks that
fail the job later (the server's re-validation, the protobuf config, the driver's hook check).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.spec import normalize as n
from rtenv_cli.core.spec.construct import RaySemantics, construct
from rtenv_cli.core.spec.package_stage import Packager
from rtenv_cli.core.spec.pipeline_result import Api, PipelineResult

if TYPE_CHECKING:
    from rtenv_cli.core.spec.package_stage import PackageMemo

__all__ = ["HOOK_ENV_VAR", "Api", "PipelineResult", "RaySemantics", "run_pipeline"]

HOOK_ENV_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"


def _e(message: str, path: tuple[Any, ...], kind: str, stage: str,
       hint: str | None = None) -> n.RuntimeEnvValueError:
    return n.RuntimeEnvValueError(message, path, python_type=kind, stage=stage,
                                  hint=hint)


def _non_finite(obj: Any, path: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    if isinstance(obj, float) and not math.isfinite(obj):
        return path
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = _non_finite(v, (*path, k))
            if found is not None:
                return found
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = _non_finite(v, (*path, i))
            if found is not None:
                return found
    return None


def _unencodable(  # noqa: PLR0911 - one return per JSON type
    obj: Any, path: tuple[Any, ...] = (),
) -> tuple[tuple[Any, ...], str] | None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                return (*path, k), ("keys must be str, int, float, bool or None, not "
                                    f"{type(k).__name__}")
            found = _unencodable(v, (*path, k))
            if found:
                return found
        return None
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = _unencodable(v, (*path, i))
            if found:
                return found
        return None
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return None
    return path, f"Object of type {type(obj).__name__} is not JSON serializable"


def run_pipeline(  # noqa: PLR0912 - the stages of Ray's submit path, in order
    data: Any, ray: RaySemantics, *, prefix: tuple[Any, ...] = (),
    cache: PackageMemo | None = None,
) -> PipelineResult:
    api = ray.api
    result = PipelineResult()
    if not data:  # `runtime_env or {}`: empty file, comments only, false, [], 0, ""
        data = {}
    if not isinstance(data, dict):
        result.errors.append(_e(f"'{type(data).__name__}' object has no attribute 'get'",
                                prefix, "AttributeError", "shape", hint=_shape_hint(data)))
        return result
    import copy

    rt = copy.deepcopy(data)
    packager = Packager(ray, prefix, result, cache=cache)
    ok = True
    if api == "job-submit":
        ok = packager.working_dir(rt) and packager.py_modules(rt)
    else:
        ok = packager.py_modules(rt) and packager.working_dir(rt)
    _setup_hook(rt, api, result, prefix)
    if api == "ray-init":
        rt.pop("excludes", None)
    bad_keys = [k for k in rt if not isinstance(k, str)]
    for key in bad_keys:
        result.errors.append(_e("keywords must be strings", (*prefix, key), "TypeError", "shape",
                                hint="quote the key: YAML read it as "
                                f"{type(key).__name__} {key!r}"))
        del rt[key]
    if "self" in rt:
        result.errors.append(_e("RuntimeEnv.__init__() got multiple values for argument 'self'",
                                (*prefix, "self"), "TypeError", "shape",
                                hint="remove the `self` key"))
        del rt["self"]
    if not ok:  # Ray stopped in packaging; still check the fields we can
        for key in ("working_dir", "py_modules"):
            if isinstance(rt.get(key), (str, list)):
                rt.pop(key)
    if api == "job-submit":
        _job_submit_tail(rt, ray, prefix, result)
    else:
        _ray_init_tail(rt, ray, prefix, result)
    # collected out of order (e.g. the driver's hook check); Ray's order decides which is first
    result.errors.sort(key=lambda exc: _STAGE_ORDER.get(exc.stage, len(_STAGE_ORDER)))
    if result.errors:
        result.normalized = None
    return result


def _shape_hint(data: Any) -> str:
    """What the user meant by a document that is no mapping (Ray: `'<type>' object has no
    attribute 'get'`)."""
    import re

    if isinstance(data, str):
        glued = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*):(\S.*)$", data)
        if glued:
            return (f"YAML reads the line as one string: put a space after the colon "
                    f"(`{glued.group(1)}: {glued.group(2)}`)")
    if isinstance(data, list) and data and all(isinstance(a, dict) and "import_path" in a
                                               for a in data):
        return ("this is a list of Serve applications: put `applications:` above it and "
                "indent the items (`serve deploy` reads that key)")
    if isinstance(data, list) and data and all(isinstance(a, str) for a in data):
        return "a list of packages goes under a field: `pip: [...]`"
    return "a runtime_env file must hold a mapping of fields"


_STAGE_ORDER = {name: i for i, name in enumerate(
    ("packaging", "upload", "setup_hook", "shape", "runtime_env", "json", "server",
     "driver"))}


def _job_submit_tail(rt: dict[str, Any], ray: RaySemantics, prefix: tuple[Any, ...],
                     result: PipelineResult) -> None:
    """RuntimeEnv(**rt) + to_dict(), the JSON body, then the job server's re-validation."""
    built = construct(rt, ray, prefix=prefix)
    for exc in built.errors:
        exc.stage = "runtime_env"
    result.errors.extend(built.errors)
    _encode(built.normalized, "job-submit", result, prefix)
    if any(exc.stage != "driver" for exc in result.errors):  # the client raised: not sent
        return
    normalized = json.loads(json.dumps(built.normalized, allow_nan=False))
    result.normalized = normalized
    again = construct(normalized, ray, prefix=prefix)
    for exc in again.errors:
        exc.stage = "server"
        exc.hint = exc.hint or ("the client accepted this (`_validate: false`), but the job "
                                "fails when the server re-validates it")
    result.errors.extend(again.errors)
    if isinstance(normalized.get("config"), dict):
        for exc in n.config_proto_errors(normalized["config"], (*prefix, "config")):
            exc.stage = "server"
            exc.hint = ("ray job submit accepts this, then the job FAILS at supervisor start; "
                        "use an integer between 1 and 2147483647, or -1")
            result.errors.append(exc)


def _ray_init_tail(rt: dict[str, Any], ray: RaySemantics, prefix: tuple[Any, ...],
                   result: PipelineResult) -> None:
    """set_runtime_env(validate=True): RuntimeEnv(**rt) (no to_dict), then the job config's
    protobuf: `serialize()` rebuilds a validated RuntimeEnv from it and json.dumps it."""
    built = construct(rt, ray, prefix=prefix, to_dict=False)
    for exc in built.errors:
        exc.stage = "runtime_env"
    result.errors.extend(built.errors)
    if built.errors:
        return
    # get_runtime_env_info: the config (raw under `_validate: false`) and its protobuf first...
    config = built.normalized.get("config")
    if config is not None:
        try:
            checked = n.normalize_config(config, (*prefix, "config"))
        except n.RuntimeEnvValueError as exc:
            result.errors.append(exc)
            return
        for err in n.config_proto_errors(checked, (*prefix, "config")):
            err.hint = "use an integer between 1 and 2147483647, or -1"
            result.errors.append(err)
        if result.errors:
            return
    # ... then `serialize()`
    serialized = construct(built.normalized, ray, prefix=prefix, to_dict=False)
    for err in serialized.errors:
        err.stage = "runtime_env"
    result.errors.extend(serialized.errors)
    _encode(serialized.normalized, "ray-init", result, prefix)
    if not result.errors:
        result.normalized = json.loads(json.dumps(serialized.normalized, allow_nan=True))


def _setup_hook(rt: dict[str, Any], api: Api, result: PipelineResult,
                prefix: tuple[Any, ...]) -> None:
    hook = rt.get("worker_process_setup_hook")
    path = (*prefix, "worker_process_setup_hook")
    if api == "job-submit":
        if hook is not None and not isinstance(hook, str):
            stage = "setup_hook"
            try:
                truthy = bool(hook)
            except Exception:  # a value whose bool() fails: Ray's `if` fails the same way
                truthy = True
            if not truthy:
                stage = "driver"  # falsy non-str hooks pass the client, then ray.init fails
                message = f"worker_process_setup_hook must be a function, got {type(hook)}."
                kind = "TypeError"
            else:
                message = (f"Invalid type {type(hook)} for `worker_process_setup_hook`. When a "
                           "job submission API is used, `worker_process_setup_hook` only allows "
                           "a string type (module name).")
                kind = "ValueError"
            result.errors.append(_e(message, path, kind, stage,
                                    hint="give the hook as a string: `my_module.setup`"))
        return
    if hook is None:
        return
    env_vars = rt.get("env_vars", {})
    if not isinstance(env_vars, dict):
        result.errors.append(_e(f"'{type(env_vars).__name__}' object has no attribute 'get'",
                                (*prefix, "env_vars"), "AttributeError", "setup_hook",
                                hint="ray.init needs env_vars to be a mapping when a "
                                "worker_process_setup_hook is set"))
        return
    if env_vars.get(HOOK_ENV_VAR) is not None:
        return
    if isinstance(hook, str):
        env_vars[HOOK_ENV_VAR] = hook
        rt["env_vars"] = env_vars
        return
    result.errors.append(_e(f"worker_process_setup_hook must be a function, got {type(hook)}.",
                            path, "TypeError", "setup_hook",
                            hint="give the hook as a string: `my_module.setup`"))


def _encode(normalized: dict[str, Any], api: Api, result: PipelineResult,
            prefix: tuple[Any, ...]) -> None:
    bad = _unencodable(normalized)
    if bad is not None:
        path, message = bad
        result.errors.append(_e(message, (*prefix, *path), "TypeError", "json",
                                hint="quote the value: YAML 1.1 turned it into a non-JSON type"))
        return
    if api == "job-submit":
        where = _non_finite(normalized)
        if where is not None:
            result.errors.append(_e("Out of range float values are not JSON compliant",
                                    (*prefix, *where), "InvalidJSONError", "json",
                                    hint="NaN and infinity cannot be sent to the job server; "
                                    "quote the value"))

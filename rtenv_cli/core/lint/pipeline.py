"""Ray 2.60.0's client -> server -> driver path for one runtime_env, every error collected.

`run_pipeline(data, base_dir, api)` follows `ray job submit` (api="job-submit") or `ray.init`
(api="ray-init") stage by stage: shape, packaging of local working_dir/py_modules (the URI comes
from `rtenv_cli.core.packaging.hashing.package_uri` when that module is present), the setup hook,
`RuntimeEnv(...)` + `_validate_no_local_paths` + `to_dict()`, JSON encoding, and the checks that
fail the job later (the server's re-validation, the protobuf config, the driver's hook check).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rtenv_cli.core.spec import model
from rtenv_cli.core.spec import normalize as n
from rtenv_cli.core.spec.construct import construct

Api = Literal["job-submit", "ray-init"]
PLACEHOLDER_URI = "gcs://_ray_pkg_0000000000000000.zip"
HOOK_ENV_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"


@dataclass
class PipelineResult:
    errors: list[n.RuntimeEnvValueError] = field(default_factory=list)
    normalized: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    packages: list[tuple[tuple[Any, ...], Path, str]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def _e(message: str, path: tuple[Any, ...], kind: str, stage: str,
       hint: str | None = None) -> n.RuntimeEnvValueError:
    return n.RuntimeEnvValueError(message, path, kind=kind, stage=stage, hint=hint)


def _resolve(p: str, base_dir: Path) -> Path:
    return Path(p) if Path(p).is_absolute() else base_dir / p


class _Packager:
    """Replaces local working_dir/py_modules with `gcs://` URIs the way Ray's helpers do."""

    def __init__(self, base_dir: Path, api: Api, env: Mapping[str, str], prefix: tuple[Any, ...],
                 result: PipelineResult) -> None:
        self.base_dir, self.api, self.env, self.prefix, self.result = (base_dir, api, env, prefix,
                                                                      result)

    def fail(self, message: str, path: tuple[Any, ...], kind: str = "ValueError",
             hint: str | None = None) -> None:
        self.result.errors.append(_e(message, (*self.prefix, *path), kind, "packaging", hint))

    def uri_for(self, source: Path, kind: str, excludes: list[str], json_path: tuple[Any, ...]
                ) -> str:
        self.result.packages.append(((*self.prefix, *json_path), source, kind))
        try:
            from rtenv_cli.core.packaging.hashing import package_uri
        except ImportError:
            # rtenv's packaging feature is not installed: the same rules, walked here
            from rtenv_cli.core.lint import packscan

            if source.is_dir():
                walked = packscan.cached_walk(source, kind, excludes, self.env)
                too_big = walked.total_bytes >= model.GCS_PACKAGE_LIMIT
                if walked.truncated or too_big:
                    # hashing would read every byte of a package Ray cannot upload anyway
                    why = (f"has more than {packscan.WALK_LIMIT} paths" if walked.truncated
                           else "is over Ray's 512 MiB package limit")
                    self.result.notes.append(f"{source} {why}: its gcs:// URI is not computed "
                                             "and is omitted from `normalized`")
                    return PLACEHOLDER_URI
                return packscan.directory_uri(walked)
            return packscan.file_uri(source)
        return package_uri(source, kind=kind, excludes=tuple(excludes), env=dict(self.env))

    def _uri_checked(self, value: str, field_name: str, path: tuple[Any, ...]) -> bool | None:
        """True: a URI (passed through); None: an error was recorded; False: a local path."""
        try:
            if n.local_dir_uri_path(value) is not None:
                return True
        except ValueError as exc:
            self.fail(str(exc), path)
            return None
        try:
            protocol, name = n.parse_uri(value)
        except ValueError:
            return False
        if protocol == "gcs" or protocol in model.REMOTE_PROTOCOLS:
            try:
                n.check_extension(name, field_name, value.split("?", 1)[0])
            except ValueError as exc:
                self.fail(str(exc), path)
                return None
        return True

    def working_dir(self, rt: dict[str, Any]) -> bool:  # noqa: PLR0911 - Ray's stages, in order
        wd = rt.get("working_dir")
        if wd is None:
            return True
        path = ("working_dir",)
        if not isinstance(wd, str):
            self.fail("working_dir must be a string or Path (either a local path or remote URI), "
                      f"got {type(wd)}.", path, "TypeError")
            return False
        is_uri = self._uri_checked(wd, "working_dir", path)
        if is_uri is None:
            return False
        if is_uri:
            return True
        user = rt.get("excludes") or []
        try:
            user_list = list(user)
        except TypeError as exc:
            self.fail(str(exc), ("excludes",), "TypeError")
            return False
        source = _resolve(wd, self.base_dir)
        if source.is_dir():
            problem = pathspec_problem(user_list)
            if problem:
                self.fail(problem, ("excludes",), "TypeError",
                          hint="write excludes as a list of strings")
                return False
            rt["working_dir"] = self.uri_for(source, "working_dir", [p for p in user_list if p],
                                             path)
            return True
        ext = n.package_extension(source.name, model.WORKING_DIR_EXTENSIONS)
        if not source.exists() or ext is None:
            self.fail(f"directory {Path(wd)} must be an existing directory or a supported archive "
                      f"({', '.join(model.WORKING_DIR_EXTENSIONS)})", path,
                      hint=f"relative paths resolve against {self.base_dir}, not the file")
            return False
        import hashlib

        digest = hashlib.sha1(source.read_bytes()).hexdigest()  # noqa: S324 - Ray's package name
        ext = ".tar.gz" if ext in (".tgz", ".tar.gz") else ext
        rt["working_dir"] = f"gcs://_ray_pkg_{digest}{ext}"
        return True

    def py_modules(self, rt: dict[str, Any]) -> bool:
        mods = rt.get("py_modules")
        if mods is None:
            return True
        if not isinstance(mods, list):
            self.fail("py_modules must be a List of local paths, imported modules, or URIs, got "
                      f"{type(mods)}.", ("py_modules",), "TypeError")
            return False
        uris: list[Any] = []
        for index, mod in enumerate(mods):
            path = ("py_modules", index)
            if not isinstance(mod, str):
                self.fail("py_modules must be a list of file paths, URIs, or imported modules, "
                          f"got {type(mod)}.", path, "TypeError")
                return False
            uri = self._module(rt, mod, path)
            if uri is None:
                return False
            uris.append(uri)
        rt["py_modules"] = uris
        return True

    def _module(  # noqa: PLR0911 - one return per Ray branch
        self, rt: dict[str, Any], mod: str, path: tuple[Any, ...],
    ) -> str | None:
        is_uri = self._uri_checked(mod, "py_modules", path)
        if is_uri is None:
            return None
        if is_uri:
            return mod
        source = _resolve(mod, self.base_dir)
        if source.is_dir() or Path(mod).suffix == ".py":
            if source.is_dir():
                excludes = rt.get("excludes")
                patterns = [] if excludes is None else excludes
                problem = pathspec_problem(patterns)
                if problem:
                    self.fail(problem, ("excludes",), "TypeError",
                              hint="write excludes as a list of strings")
                    return None
                return self.uri_for(source, "py_module", [p for p in patterns if p], path)
            patterns = []
            absolute = source.absolute()
            if not source.is_file():
                self.fail(f"File {absolute} must be an existing file", path)
                return None
            if self.api == "job-submit":
                # Ray bug: the job SDK's upload callback always packages a directory
                self.fail(f"directory {absolute} must be an existing directory", path,
                          hint="`ray job submit` cannot upload a single .py module: put it in a "
                          "directory and list the directory, or use ray.init(runtime_env=...)")
                return None
            return self.uri_for(source, "py_module", patterns, path)
        if Path(mod).suffix == ".whl":
            if not source.is_file():
                if self.api == "job-submit":
                    self.fail(f"[Errno 2] No such file or directory: '{mod}'", path,
                              "FileNotFoundError")
                else:
                    self.fail(f"Failed to upload {mod} to the Ray cluster: [Errno 2] No such "
                              f"file or directory: '{mod}'", path, "RuntimeEnvSetupError")
                return None
            return f"gcs://{Path(mod).name}"
        self.fail(f"py_modules entry must be a .py file, a directory, or a .whl file; got {mod}",
                  path)
        return None


def pathspec_problem(lines: Any) -> str | None:
    """What Ray's vendored pathspec (`PathSpec.from_lines`) raises for these patterns, if any:
    strings and non-iterables are refused, falsy items skipped, other non-strings refused."""
    from collections.abc import Iterable

    if isinstance(lines, (str, bytes)) or not isinstance(lines, Iterable):
        return f"lines:{lines!r} is not an iterable."
    for line in lines:
        if line and not isinstance(line, str):
            return f"pattern:{line!r} is not a string, RegexObject, or None."
    return None


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
    data: Any, base_dir: Path, api: Api = "job-submit", *,
    env: Mapping[str, str] | None = None, prefix: tuple[Any, ...] = (),
) -> PipelineResult:
    env = os.environ if env is None else env
    result = PipelineResult()
    if not data:  # `runtime_env or {}`: empty file, comments only, false, [], 0, ""
        data = {}
    if not isinstance(data, dict):
        result.errors.append(_e(f"'{type(data).__name__}' object has no attribute 'get'",
                                prefix, "AttributeError", "shape",
                                hint="a runtime_env file must hold a mapping of fields"))
        return result
    import copy

    rt = copy.deepcopy(data)
    packager = _Packager(base_dir, api, env, prefix, result)
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
        _job_submit_tail(rt, base_dir, env, prefix, result)
    else:
        _ray_init_tail(rt, base_dir, env, prefix, result)
    # collected out of order (e.g. the driver's hook check); Ray's order decides which is first
    result.errors.sort(key=lambda exc: _STAGE_ORDER.get(exc.stage, len(_STAGE_ORDER)))
    if result.errors:
        result.normalized = None
    return result


_STAGE_ORDER = {name: i for i, name in enumerate(
    ("packaging", "setup_hook", "shape", "runtime_env", "json", "server", "driver"))}


def _job_submit_tail(rt: dict[str, Any], base_dir: Path, env: Mapping[str, str],
                     prefix: tuple[Any, ...], result: PipelineResult) -> None:
    """RuntimeEnv(**rt) + to_dict(), the JSON body, then the job server's re-validation."""
    built = construct(rt, base_dir, env=env, prefix=prefix)
    for exc in built.errors:
        exc.stage = "runtime_env"
    result.errors.extend(built.errors)
    _encode(built.normalized, "job-submit", result, prefix)
    if any(exc.stage != "driver" for exc in result.errors):  # the client raised: not sent
        return
    normalized = json.loads(json.dumps(built.normalized, allow_nan=False))
    result.normalized = normalized
    again = construct(normalized, base_dir, env=env, prefix=prefix)
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


def _ray_init_tail(rt: dict[str, Any], base_dir: Path, env: Mapping[str, str],
                   prefix: tuple[Any, ...], result: PipelineResult) -> None:
    """set_runtime_env(validate=True): RuntimeEnv(**rt) (no to_dict), then the job config's
    protobuf: `serialize()` rebuilds a validated RuntimeEnv from it and json.dumps it."""
    built = construct(rt, base_dir, env=env, prefix=prefix, to_dict=False)
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
        for exc in n.config_proto_errors(checked, (*prefix, "config")):
            exc.hint = "use an integer between 1 and 2147483647, or -1"
            result.errors.append(exc)
        if result.errors:
            return
    # ... then `serialize()`
    serialized = construct(built.normalized, base_dir, env=env, prefix=prefix, to_dict=False)
    for exc in serialized.errors:
        exc.stage = "runtime_env"
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
        path = _non_finite(normalized)
        if path is not None:
            result.errors.append(_e("Out of range float values are not JSON compliant",
                                    (*prefix, *path), "InvalidJSONError", "json",
                                    hint="NaN and infinity cannot be sent to the job server; "
                                    "quote the value"))

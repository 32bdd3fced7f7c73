"""Ray 2.60.0's per-field runtime_env parsers, re-implemented without importing Ray.

Each `normalize_*` returns what `RuntimeEnv` stores for the field (None: the field is dropped) or
raises `RuntimeEnvValueError` carrying Ray's message, the Python exception type Ray raises
(`python_type`) and the JSON path of the offending value. Relative paths resolve against `base_dir`,
which is the CWD for Ray (`ray job submit` reads requirement files from its own CWD).

`RuntimeEnv` runs every parser twice: once in its constructor and once more in `to_dict()`
(deep-copying a dict subclass calls `__setitem__`). The functions here return the result of both
passes, i.e. the value Ray sends to the cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from rtenv_cli.core.errors import ValidationError
from rtenv_cli.core.spec import model

JsonPath = tuple[Any, ...]
# which of RuntimeEnv's checks refuses a value: a field's parser, or a rule between fields
Check = Literal["field", "conflict"]
_WINDOWS_DRIVE = re.compile(r"^[a-zA-Z]:[\\/]")


class RuntimeEnvValueError(ValidationError):
    """A value Ray rejects: `python_type` is the Python exception type Ray raises for it,
    `json_path` where it is, `stage` which step of Ray's processing refuses it, `check` which
    of RuntimeEnv's checks: a field's own parser, or a rule between fields (`conflict`)."""

    def __init__(self, message: str, json_path: JsonPath = (), *,
                 python_type: str = "ValueError", stage: str = "runtime_env",
                 hint: str | None = None, check: Check = "field") -> None:
        super().__init__(message, hint=hint)
        self.json_path = tuple(json_path)
        self.python_type = python_type
        self.stage = stage
        self.check: Check = check

    def to_dict(self) -> dict[str, object]:
        return {**super().to_dict(), "python_type": self.python_type,
                "json_path": list(self.json_path)}


def _err(message: str, path: JsonPath, python_type: str = "ValueError") -> RuntimeEnvValueError:
    return RuntimeEnvValueError(message, path, python_type=python_type)


def _resolve(p: str, base_dir: Path) -> Path:
    return Path(p) if Path(p).is_absolute() else Path(base_dir) / p


def _dedup(items: list[Any], path: JsonPath) -> list[Any]:
    try:
        return list(dict.fromkeys(items))
    except TypeError as exc:  # OrderedDict.fromkeys on unhashable items
        raise _err(str(exc), path, "TypeError") from None


# -- URIs --------------------------------------------------------------------------------------
def is_path(value: str) -> bool:
    """Ray's `is_path` on POSIX: no URL scheme (so `C:/x` and `my:dir` are URIs)."""
    return not urlparse(value).scheme


def package_extension(path: str, extensions: tuple[str, ...]) -> str | None:
    for ext in sorted(extensions, key=len, reverse=True):
        if path.endswith(ext):
            return ext
    return None


def parse_uri(uri: str) -> tuple[str, str]:
    """(protocol, package name) like Ray's `parse_uri`; ValueError text as Ray's."""
    if is_path(uri):
        raise ValueError(f"Expected URI but received path {uri}")
    parsed = urlparse(uri)
    protocol = parsed.scheme
    if protocol not in model.ALL_PROTOCOLS:
        raise ValueError(f'Invalid protocol for runtime_env URI "{uri}". Supported protocols: '
                         f"{[p.upper() for p in model.ALL_PROTOCOLS]}.")
    if protocol == "local":
        prefix = "local://"
        if uri[: len(prefix)].lower() != prefix:
            raise ValueError(f'Invalid "local://" runtime_env URI "{uri}": a local URI must start '
                             "with local://. Write local:///path/in/image, or "
                             "local://C:/path/in/image on Windows.")
        path = uri[len(prefix):]
        if path.startswith("/") and _WINDOWS_DRIVE.match(path[1:]):
            path = path[1:]
        if not (path.startswith("/") or _WINDOWS_DRIVE.match(path)):
            raise ValueError(f'Invalid "local://" runtime_env URI "{uri}": the path must be '
                             "absolute. Write local:///path/in/image, or "
                             "local://C:/path/in/image on Windows.")
        ext = package_extension(path, model.PY_MODULES_EXTENSIONS)
        if ext is not None:
            raise ValueError(f'Invalid "local://" runtime_env URI "{uri}": the path must be a '
                             f"directory, not a {ext} archive. A local:// directory is used in "
                             "place and is never unpacked.")
        return protocol, path
    if protocol in model.REMOTE_PROTOCOLS:
        if parsed.path.endswith(".whl"):
            return protocol, parsed.path.split("/")[-1]
        raw = parsed.netloc + parsed.path
        suffix = package_extension(raw, (".tar.gz", ".tar.bz2", ".tar.xz"))
        if suffix is None:
            suffix = Path(raw).suffix
        return protocol, f"{protocol}_<sha1>{suffix}"
    return protocol, parsed.netloc


def local_dir_uri_path(uri: str) -> str | None:
    """The path of a `local://` URI (malformed ones raise ValueError), None for anything else."""
    if urlparse(uri).scheme != "local":
        return None
    return parse_uri(uri)[1]


def check_extension(name: str, field: str, display: str) -> None:
    exts = model.WORKING_DIR_EXTENSIONS if field == "working_dir" else model.PY_MODULES_EXTENSIONS
    if package_extension(name, exts) is None:
        raise ValueError(f"Only {', '.join(exts)} files are supported for {field} URIs; "
                         f"got {display}.")


def validate_uri(uri: str, field: str, path: JsonPath) -> None:
    """Ray's `validation.validate_uri`."""
    try:
        if local_dir_uri_path(uri) is not None:
            return
    except ValueError as exc:  # not re-wrapped by Ray: it runs before the try block
        raise _err(str(exc), path) from None
    try:
        protocol, name = parse_uri(uri)
    except ValueError:
        raise _err(f"{uri} is not a valid URI. Passing directories or modules to be dynamically "
                   "uploaded is only supported at the job level (i.e., passed to `ray.init`).",
                   path) from None
    if protocol == "gcs" or protocol in model.REMOTE_PROTOCOLS:
        try:
            check_extension(name, field, uri.split("?", 1)[0])
        except ValueError as exc:
            raise _err(str(exc), path) from None


def validate_path(p: str, base_dir: Path, path: JsonPath) -> None:
    try:
        _resolve(p, base_dir).resolve(strict=True)
    except OSError:
        raise _err(f"{Path(p)} is not a valid path.", path) from None


# -- fields ------------------------------------------------------------------------------------
def normalize_working_dir(value: object, base_dir: Path, path: JsonPath = ("working_dir",)) -> str:
    if not isinstance(value, str):
        raise _err(f"`working_dir` must be a string, got {type(value)}.", path, "TypeError")
    if is_path(value):
        validate_path(value, base_dir, path)
    else:
        validate_uri(value, "working_dir", path)
    return value


def normalize_py_modules(value: object, base_dir: Path,
                         path: JsonPath = ("py_modules",)) -> list[Any]:
    if not isinstance(value, list):
        raise _err(f"`py_modules` must be a list of strings, got {type(value)}.", path,
                   "TypeError")
    for index, module in enumerate(value):
        if not isinstance(module, str):
            raise _err(f"`py_module` must be a string, got {type(module)}.", (*path, index),
                       "TypeError")
        if is_path(module):
            validate_path(module, base_dir, (*path, index))
        else:
            validate_uri(module, "py_modules", (*path, index))
    return value


def normalize_excludes(value: object, path: JsonPath = ("excludes",)) -> list[str] | None:
    if isinstance(value, list) and not value:
        return None
    if isinstance(value, list) and all(isinstance(p, str) for p in value):
        return value
    raise _err(f"runtime_env['excludes'] must be of type List[str], got {type(value)}", path,
               "TypeError")


def read_requirements(p: str, base_dir: Path, path: JsonPath) -> list[str]:
    """Ray reads a requirements file as `read_text().strip().split("\\n")` (comments included)."""
    file = _resolve(p, base_dir)
    if not _is_file(file, path):
        raise _err(f"{Path(p)} is not a valid file", path)
    return requirement_lines(file, path)


def requirement_lines(file: Path, path: JsonPath = ()) -> list[str]:
    """A requirements file's lines, as Ray splits them, read as a runtime_env file is: a
    regular file of at most MAX_FILE_BYTES (Ray would read `/dev/zero` until memory runs out,
    or wait on a FIFO), decoded as Ray decodes it. Every reader of requirements files (run,
    lint, the store's venv keys) reads them here."""
    from rtenv_cli.core.errors import ConfigError
    from rtenv_cli.core.spec.loader import read_text

    try:
        return read_text(file, "requirements file").strip().split("\n")
    except ConfigError as exc:
        raise _err(exc.message, path, "OSError") from None


def _is_file(file: Path, path: JsonPath) -> bool:
    """Ray's `is_file()`; a name the system cannot look up (over NAME_MAX, a component that
    is a file) is an error naming it, as Ray's raises one."""
    try:
        return file.is_file()
    except OSError as exc:
        raise _err(f"{file}: {exc.strerror}", path, "OSError") from None


def _first_unknown(value: dict[Any, Any], known: tuple[str, ...]) -> Any:
    return next(k for k in value if k not in known)


def _check_options(value: dict[str, Any], key: str, field: str, path: JsonPath) -> None:
    options = value[key]
    if not isinstance(options, list):
        raise _err(f"runtime_env['{field}']['{key}'] must be of type list[str] got "
                   f"{type(options)}", (*path, key), "TypeError")
    for index, option in enumerate(options):
        if not isinstance(option, str):
            raise _err(f"runtime_env['{field}']['{key}'] must be of type list[str] got "
                       f"{type(option)} for {index}-th item.", (*path, key, index), "TypeError")


def pip_once(value: object, base_dir: Path, path: JsonPath) -> dict[str, Any] | None:
    if isinstance(value, str):
        result: dict[str, Any] = {"packages": read_requirements(value, base_dir, path),
                                  "pip_check": False}
    elif isinstance(value, list) and all(isinstance(d, str) for d in value):
        result = {"packages": value, "pip_check": False}
    elif isinstance(value, dict):
        if set(value) - set(model.PIP_KEYS):
            raise _err("runtime_env['pip'] can only have these fields: packages, pip_check, "
                       f"pip_install_options and pip_version, but got: {list(value)}",
                       (*path, _first_unknown(value, model.PIP_KEYS)))
        if "pip_check" in value and not isinstance(value["pip_check"], bool):
            raise _err("runtime_env['pip']['pip_check'] must be of type bool, got "
                       f"{type(value['pip_check'])}", (*path, "pip_check"), "TypeError")
        if "pip_version" in value and not isinstance(value["pip_version"], str):
            raise _err("runtime_env['pip']['pip_version'] must be of type str, got "
                       f"{type(value['pip_version'])}", (*path, "pip_version"), "TypeError")
        if "pip_install_options" in value:
            _check_options(value, "pip_install_options", "pip", path)
        result = dict(value)
        result["pip_check"] = value.get("pip_check", False)
        if "packages" not in value:
            raise _err(f"runtime_env['pip'] must include field 'packages', but got {value}", path)
        packages = value["packages"]
        if isinstance(packages, str):
            result["packages"] = read_requirements(packages, base_dir, (*path, "packages"))
        elif not isinstance(packages, list):
            raise _err("runtime_env['pip']['packages'] must be of type str of list, got: "
                       f"{type(packages)}", (*path, "packages"))
    else:
        raise _err(f"runtime_env['pip'] must be of type str or List[str], got {type(value)}",
                   path, "TypeError")
    result["packages"] = _dedup(result["packages"], (*path, "packages"))
    return result if result["packages"] else None


def normalize_pip(value: object, base_dir: Path,
                  path: JsonPath = ("pip",)) -> dict[str, Any] | None:
    first = pip_once(value, base_dir, path)
    return None if first is None else pip_once(first, base_dir, path)


def uv_once(value: object, base_dir: Path, path: JsonPath) -> dict[str, Any] | None:
    if isinstance(value, str):
        result: dict[str, Any] = {"packages": read_requirements(value, base_dir, path),
                                  "uv_check": False}
    elif isinstance(value, list) and all(isinstance(d, str) for d in value):
        result = {"packages": value, "uv_check": False}
    elif isinstance(value, dict):
        if set(value) - set(model.UV_KEYS):
            raise _err("runtime_env['uv'] can only have these fields: packages, uv_check, "
                       f"uv_version and uv_pip_install_options, but got: {list(value)}",
                       (*path, _first_unknown(value, model.UV_KEYS)))
        if "packages" not in value:
            raise _err(f"runtime_env['uv'] must include field 'packages', but got {value}", path)
        if "uv_check" in value and not isinstance(value["uv_check"], bool):
            raise _err("runtime_env['uv']['uv_check'] must be of type bool, got "
                       f"{type(value['uv_check'])}", (*path, "uv_check"), "TypeError")
        if "uv_version" in value and not isinstance(value["uv_version"], str):
            raise _err("runtime_env['uv']['uv_version'] must be of type str, got "
                       f"{type(value['uv_version'])}", (*path, "uv_version"), "TypeError")
        if "uv_pip_install_options" in value:
            _check_options(value, "uv_pip_install_options", "uv", path)
        result = dict(value)
        result["uv_check"] = value.get("uv_check", False)
        result["uv_pip_install_options"] = value.get("uv_pip_install_options", ["--no-cache"])
        packages = value["packages"]
        if not isinstance(packages, list):
            raise _err(f"runtime_env['uv']['packages'] must be of type list, got: "
                       f"{type(packages)}", (*path, "packages"))
        for index, package in enumerate(packages):
            if not isinstance(package, str):
                raise _err("runtime_env['uv']['packages'] must be of type list[str] got "
                           f"{type(package)} for {index}-th item.", (*path, "packages", index),
                           "TypeError")
    else:
        raise _err(f"runtime_env['uv'] must be of type List[str], or dict, got {type(value)}",
                   path, "TypeError")
    result["packages"] = _dedup(result["packages"], (*path, "packages"))
    return result if result["packages"] else None


def normalize_uv(value: object, base_dir: Path,
                 path: JsonPath = ("uv",)) -> dict[str, Any] | None:
    # the second pass (to_dict) takes the dict branch: that is what adds uv_pip_install_options
    first = uv_once(value, base_dir, path)
    return None if first is None else uv_once(first, base_dir, path)


def conda_once(value: object, base_dir: Path, path: JsonPath) -> object:
    if isinstance(value, str):
        file = Path(value)
        if file.suffix in (".yaml", ".yml"):  # case-sensitive, like Ray
            resolved = _resolve(value, base_dir)
            if not _is_file(resolved, path):
                raise _err(f"Can't find conda YAML file {file}.", path)
            import yaml

            from rtenv_cli.core.spec.loader import read_text

            try:  # bounded, as every file rtenv reads
                return yaml.safe_load(read_text(resolved, "conda file"))
            except Exception as exc:  # Ray wraps every failure of the conda file the same way
                raise _err(f"Failed to read conda file {file}: {exc}.", path) from None
        if file.is_absolute():
            if not file.is_dir():
                raise _err(f"Can't find conda env directory {file}.", path)
            return str(file)
        return value
    if isinstance(value, dict):
        return value
    raise _err(f"runtime_env['conda'] must be of type str or dict, got {type(value)}.", path,
               "TypeError")


def normalize_conda(value: object, base_dir: Path, path: JsonPath = ("conda",)) -> object:
    first = conda_once(value, base_dir, path)
    return None if first is None else conda_once(first, base_dir, path)


def normalize_env_vars(value: object, path: JsonPath = ("env_vars",)) -> dict[str, str] | None:
    try:
        empty = len(value) == 0  # type: ignore[arg-type]  # Ray calls len() before the type check
    except TypeError as exc:
        raise _err(str(exc), path, "TypeError") from None
    if empty:
        return None
    if not isinstance(value, dict):
        raise _err(f"runtime_env['env_vars'] must be of type Dict[str, str], got {type(value)}",
                   path, "TypeError")
    for key, val in value.items():
        if not isinstance(key, str):
            raise _err(f"runtime_env['env_vars'] must be of type Dict[str, str], but the key "
                       f"{key} is of type {type(key)}", (*path, key), "TypeError")
        if not isinstance(val, str):
            raise _err(f"runtime_env['env_vars'] must be of type Dict[str, str], but the value "
                       f"{val} is of type {type(val)}", (*path, key), "TypeError")
    return value


def normalize_config(value: object, path: JsonPath = ("config",)) -> dict[str, Any]:
    """`RuntimeEnvConfig.parse_and_validate_runtime_env_config`; unknown keys are dropped."""
    if not isinstance(value, Mapping):
        raise _err(f"runtime_env['config'] must be of type dict or RuntimeEnvConfig, got: "
                   f"{type(value)}", path, "TypeError")
    timeout = value.get("setup_timeout_seconds", model.CONFIG_DEFAULTS["setup_timeout_seconds"])
    if not isinstance(timeout, int):
        raise _err(f"setup_timeout_seconds must be of type int, got: {type(timeout)}",
                   (*path, "setup_timeout_seconds"), "TypeError")
    if timeout <= 0 and timeout != -1:
        raise _err(f"setup_timeout_seconds must be greater than zero or equals to -1, got: "
                   f"{timeout}", (*path, "setup_timeout_seconds"))
    eager = value.get("eager_install", True)
    if not isinstance(eager, bool):
        raise _err(f"eager_install must be a boolean. got {type(eager)}",
                   (*path, "eager_install"), "TypeError")
    log_files = value.get("log_files")
    if log_files is not None:
        if not isinstance(log_files, list):
            raise _err(f"log_files must be a list of strings or None, got {log_files} with type "
                       f"{type(log_files)}.", (*path, "log_files"), "TypeError")
        for index, name in enumerate(log_files):
            if not isinstance(name, str):
                raise _err("Each item in log_files must be a string.",
                           (*path, "log_files", index), "TypeError")
    else:
        log_files = []
    return {"setup_timeout_seconds": timeout, "eager_install": eager, "log_files": log_files}


def config_proto_errors(config: Mapping[str, Any],
                        path: JsonPath = ("config",)) -> list[RuntimeEnvValueError]:
    """What building the `RuntimeEnvConfig` protobuf rejects (Python's checks let it through)."""
    timeout = config.get("setup_timeout_seconds")
    p = (*path, "setup_timeout_seconds")
    if isinstance(timeout, bool):
        return [_err("Field ray.rpc.RuntimeEnvConfig.setup_timeout_seconds: Expected an int, "
                     "got a boolean.", p, "TypeError")]
    if isinstance(timeout, int) and not model.INT32_MIN <= timeout <= model.INT32_MAX:
        return [_err(f"Value out of range: {timeout}", p)]
    return []

"""The runtime_env field table of Ray 2.60.0 (data, not code: one place to update per release)."""

from __future__ import annotations

from dataclasses import dataclass

RAY_VERSION = "2.60.0"
# `ray.__commit__` of the 2.60.0 wheel: Ray adds it as `_ray_commit` when pip or conda is set
RAY_COMMIT = "b7f4259e944bf6959f721b106adc366ddfa0c356"


@dataclass(frozen=True)
class Field:
    name: str
    types: str
    summary: str
    validated: bool  # does RuntimeEnv(...) check it on the client?


FIELDS: tuple[Field, ...] = (
    Field("working_dir", "str", "local directory/archive (uploaded) or a package URI", True),
    Field("py_modules", "list[str]", "local dirs, .py or .whl files (uploaded), or URIs", True),
    Field("excludes", "list[str]", "gitwildmatch patterns left out of uploaded packages", True),
    Field("pip", "str | list[str] | dict", "pip requirements (file path, list or dict)", True),
    Field("uv", "str | list[str] | dict", "uv requirements (file path, list or dict)", True),
    Field("conda", "str | dict", "conda env name, env YAML path, prefix dir, or env dict", True),
    Field("env_vars", "dict[str, str]", "environment variables of every worker", True),
    Field("config", "dict", "setup_timeout_seconds, eager_install, log_files", True),
    Field("container", "dict", "legacy container spec (image, run_options, worker_path)", True),
    Field("image_uri", "str", "container image the workers run in", False),
    Field("py_executable", "str", "interpreter command for workers", False),
    Field("java_jars", "list[str]", "jar URIs for Java workers", False),
    Field("worker_process_setup_hook", "str", "module.function run when a worker starts", False),
    Field("nsight", "str | dict", "Nsight Systems profiling ('default' or options)", False),
    Field("rocprof_sys", "str | dict", "rocprof-sys profiling options", False),
    Field("_nsight", "str | dict", "internal spelling of nsight", False),
    Field("_rocprof_sys", "str | dict", "internal spelling of rocprof_sys", False),
    Field("_ray_release", "str", "extension: Ray release", False),
    Field("_ray_commit", "str", "extension: Ray commit (added by Ray with pip/conda)", False),
    Field("_inject_current_ray", "bool", "extension: inject the current Ray (dev mode)", False),
)

FIELD_BY_NAME = {f.name: f for f in FIELDS}

# RuntimeEnv.known_fields (after the nsight/rocprof_sys renames)
KNOWN_FIELDS = frozenset({
    "py_modules", "py_executable", "java_jars", "working_dir", "conda", "pip", "uv", "container",
    "excludes", "env_vars", "_ray_release", "_ray_commit", "_inject_current_ray", "config",
    "worker_process_setup_hook", "_nsight", "_rocprof_sys", "image_uri",
})
# the field of rtenv's Ray plugin (core/rayplugin/schema.py): Ray keeps it as a plugin name
RTENV_FIELD = "rtenv"
# keyword arguments of RuntimeEnv.__init__ that are renamed or are flags
RENAMED = {"nsight": "_nsight", "rocprof_sys": "_rocprof_sys"}
FLAGS = frozenset({"_validate"})
ALL_TOP_LEVEL_KEYS = KNOWN_FIELDS | frozenset(RENAMED) | FLAGS
# what a user would type (did-you-mean candidates): no internal spellings; rtenv's own plugin
# field too (a misspelt `rtnev:` silently installs nothing)
SUGGESTABLE_KEYS = tuple(sorted(
    (KNOWN_FIELDS - {"_nsight", "_rocprof_sys", "_ray_release", "_inject_current_ray"})
    | frozenset(RENAMED) | {RTENV_FIELD}
))

# named parameters of RuntimeEnv.__init__, in the order it inserts them after the **kwargs
INIT_PARAM_ORDER = ("py_modules", "py_executable", "working_dir", "pip", "uv", "conda", "nsight",
                    "rocprof_sys", "container", "env_vars", "config",
                    "worker_process_setup_hook", "image_uri")
# OPTION_TO_VALIDATION_FN order: these are deleted and re-set (validated) in this order
VALIDATED_ORDER = ("py_modules", "working_dir", "excludes", "conda", "pip", "uv", "env_vars",
                   "container", "config")
IMAGE_URI_COMPATIBLE = frozenset({"image_uri", "config", "env_vars"})
CONTAINER_COMPATIBLE = frozenset({"container", "config", "env_vars"})

PIP_KEYS = ("packages", "pip_check", "pip_install_options", "pip_version")
UV_KEYS = ("packages", "uv_check", "uv_version", "uv_pip_install_options")
CONFIG_KEYS = ("setup_timeout_seconds", "eager_install", "log_files")
CONFIG_DEFAULTS = {"setup_timeout_seconds": 600, "eager_install": True, "log_files": []}
# keys of a conda environment.yml that conda itself understands
CONDA_KEYS = ("name", "channels", "dependencies", "prefix", "variables", "channel_priority")
CONTAINER_KEYS = ("image", "run_options", "worker_path")

WORKING_DIR_EXTENSIONS = (".zip", ".tar.gz", ".tgz", ".tar.xz")
PY_MODULES_EXTENSIONS = (".zip", ".whl", ".tar.gz", ".tgz", ".tar.xz")
REMOTE_PROTOCOLS = ("http", "https", "s3", "gs", "azure", "abfss", "file")
ALL_PROTOCOLS = ("gcs", "conda", "pip", "uv", *REMOTE_PROTOCOLS, "local")
DEFAULT_EXCLUDES = (".git", ".venv", "venv", "__pycache__")
# a well-formed package URI that names no package: it stands in for a local working_dir or
# py_module where only the rest of a runtime_env is checked (validate's packaging stage, push)
PLACEHOLDER_URI = "gcs://_ray_pkg_0000000000000000.zip"

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)

JOB_SUBMIT_UPLOAD_LIMIT = 100 * 1024 * 1024  # the dashboard's aiohttp body limit
GCS_PACKAGE_LIMIT = 512 * 1024 * 1024  # GCS_STORAGE_MAX_SIZE

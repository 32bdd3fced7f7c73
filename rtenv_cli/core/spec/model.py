"""What rtenv knows of Ray 2.60.0's runtime_env, as data: the field lists derived from the field
table (spec/fields.py), the sub-keys, URI schemes and limits (one place to update per release)."""

from __future__ import annotations

from rtenv_cli.core.spec import fields as _fields

RAY_VERSION = "2.60.0"
# `ray.__commit__` of the 2.60.0 wheel: Ray adds it as `_ray_commit` when pip or conda is set
RAY_COMMIT = "b7f4259e944bf6959f721b106adc366ddfa0c356"


# derived from the field table (spec/fields.py)
FIELDS = _fields.FIELDS
KNOWN_FIELDS = frozenset(_fields.names())  # RuntimeEnv.known_fields
# the field of rtenv's Ray plugin (core/rayplugin/schema.py): Ray keeps it as a plugin name
RTENV_FIELD = "rtenv"
# keyword arguments of RuntimeEnv.__init__ that are renamed or are flags
RENAMED = _fields.RENAMED
FLAGS = frozenset({"_validate"})
ALL_TOP_LEVEL_KEYS = KNOWN_FIELDS | frozenset(RENAMED) | FLAGS
# what a user would type (did-you-mean candidates): no internal spellings; rtenv's own plugin
# field too (a misspelt `rtnev:` silently installs nothing)
SUGGESTABLE_KEYS = tuple(sorted({*_fields.names(where="suggest"), *RENAMED, RTENV_FIELD}))

# named parameters of RuntimeEnv.__init__, in the order it inserts them after the **kwargs
INIT_PARAM_ORDER = ("py_modules", "py_executable", "working_dir", "pip", "uv", "conda", "nsight",
                    "rocprof_sys", "container", "env_vars", "config",
                    "worker_process_setup_hook", "image_uri")
# OPTION_TO_VALIDATION_FN order: these are deleted and re-set (validated) in this order
VALIDATED_ORDER = _fields.names(where="validated")
# fields Ray allows one of, and those that only combine with a few others (name -> allowed)
MANAGERS = _fields.names(where="manager")
ONLY_WITH = {f.name: f.only_with for f in FIELDS if f.only_with is not None}

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

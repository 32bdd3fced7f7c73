"""The `rtenv` field's rule rows (data; the checks are in rules/rtenv_field.py, the rest of the
table in rules_docs.py)."""

from __future__ import annotations

from rtenv_cli.core.lint.diagnostic import Severity
from rtenv_cli.core.lint.rule import Rule

E = Severity.ERROR
DOCS: tuple[Rule, ...] = (
    Rule("RTE190", "rtenv-field-schema", E, "an `rtenv` field its plugin refuses",
         "Checks the `rtenv` field with the plugin's own schema: a mapping with at most one of "
         "`pip` and `uv`, `limits` and the trees `rtenv push` writes (`working_dir`, "
         "`py_modules`: rtenv-tree:// URIs) beside it or alone, no unknown key (with a "
         "did-you-mean).",
         "Ray keeps the field without checking it; the plugin refuses it on each node, after "
         "the job is submitted, as a RuntimeEnvSetupError.",
         "rtenv:\n  pipp: [six]\n", "rtenv:\n  pip: [six]\n"),
    Rule("RTE191", "rtenv-field-conflict", E, "`rtenv` beside pip, uv, conda or py_executable",
         "Flags a runtime_env that sets `rtenv` (with pip or uv) and another field choosing "
         "the interpreter (pip, uv, conda, py_executable, container, image_uri); `limits` "
         "alone conflicts only with container and image_uri.",
         "Both would set the worker's Python; the plugin refuses the runtime_env.",
         "rtenv:\n  pip: [six]\nconda: env.yml\n", "rtenv:\n  pip: [six]\n"),
    Rule("RTE192", "rtenv-relative-requirements", E, "a relative requirements file in `rtenv`",
         "Flags a requirements file given by a relative path in `rtenv.pip` / `rtenv.uv`.",
         "The plugin reads the file on each node, where a relative path means nothing: give an "
         "absolute path there or one under ${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}.",
         "rtenv:\n  pip: requirements.txt\n",
         "rtenv:\n  pip: ${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/requirements.txt\n"),
    Rule("RTE193", "rtenv-bad-limits", E, "an `rtenv.limits` value the plugin cannot apply",
         "Flags `rtenv.limits` (per-worker cgroup limits) with an unknown key, a memory that is "
         "not a size, or a CPU count that is not a positive number (core/spec/limits.py, the "
         "parser the plugin and `rtenv run --memory/--cpus` share).",
         "The plugin refuses the runtime_env on each node, after the job is submitted.",
         "rtenv:\n  pip: [six]\n  limits: {memory: lots}\n",
         "rtenv:\n  pip: [six]\n  limits: {memory: 4GB, cpus: 2}\n"),
    Rule("RTE194", "rtenv-installs-ray", E, "`ray` in the `rtenv` requirements",
         "Flags `ray` (any extra, any version) in `rtenv.pip` / `rtenv.uv`.",
         "The plugin refuses it: a worker must import the node's own Ray, which the venv "
         "already sees.",
         "rtenv:\n  pip: [\"ray[data]\", pandas]\n", "rtenv:\n  pip: [pandas]\n"),
)

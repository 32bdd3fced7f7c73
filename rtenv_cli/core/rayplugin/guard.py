"""The guard `rtenv push` writes beside an `rtenv` field of trees, apart from schema.py: a push
imports these names alone, not the field tables (and difflib) schema.py imports and builds."""

from __future__ import annotations

__all__ = ["GUARD_FIELD", "GUARD_MESSAGE", "GUARD_PREFIX"]

# `rtenv push` adds {"_nsight": GUARD_PREFIX + ...} beside an `rtenv` field of trees. Ray's own
# nsight plugin (priority 10) refuses any string but "default" with a RuntimeEnvSetupError that
# quotes it and names the node: so a node whose agent lacks rtenv's plugin fails the task, the
# actor and a `ray job submit` entrypoint loudly instead of running them in its base
# environment (Ray only logs a warning for a field no plugin takes). rtenv's plugin (priority
# 9, before nsight) removes the guard from the runtime_env it is given.
GUARD_FIELD = "_nsight"
GUARD_PREFIX = "rtenv: "
GUARD_MESSAGE = (GUARD_PREFIX + "this runtime_env needs rtenv's Ray plugin, and a node whose "
                 "runtime-env agent does not load it cannot apply its `rtenv` field (working_dir/"
                 "py_modules trees, pip/uv). hint: start the node with `rtenv ray-env` exported "
                 "before `ray start` (check: rtenv ray-env --check --address ...), or push with "
                 "--via zip")

"""Keys that are not typos: Anyscale's job/service fields (RTE109), and the test for a mapping
that is no runtime_env at all (RTE108, reported by keys.py, which knows the near-misses).
RTE101 (keys.py) leaves the keys these two explain to them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.spec import model

# Fields of Anyscale job and service specs (JobConfig, ServiceConfig, and the 1.0 YAML specs)
# that no Ray entry point reads: always Anyscale's.
ANYSCALE_FIELDS = frozenset({
    "upload_path", "compute_config", "compute_config_id", "cluster_env", "build_id",
    "project_id", "cloud_id", "containerfile", "registry_login_secret", "ray_serve_config",
    "ray_gcs_external_storage_config", "job_queue_config", "query_auth_token_enabled",
    "tracing_config", "rollout_strategy", "canary_percent", "max_surge_percent",
    "healthcheck_url",
})
# Generic names that are Anyscale's beside one of the above, or beside an `entrypoint` next to
# runtime_env fields (Anyscale's flat JobConfig; Ray's own job spec nests `runtime_env:`).
ANYSCALE_CONTEXT_FIELDS = frozenset({
    "name", "entrypoint", "cloud", "project", "requirements", "ray_version", "max_retries",
    "timeout_s", "tags", "description", "version", "version_name", "applications",
    "http_options", "grpc_options", "logging_config",
})
_MIN_FOREIGN = 2  # one odd key is a typo's business (RTE101)
_FOREIGN_RATIO = 2  # foreign keys must outnumber the others this many times


def anyscale_keys(data: Mapping[Any, Any]) -> list[str]:
    """The keys of `data` that are Anyscale job/service fields, in file order."""
    keys = [k for k in data if isinstance(k, str)]
    strong = [k for k in keys if k in ANYSCALE_FIELDS]
    if not strong and "entrypoint" not in keys:
        return []
    return [k for k in keys if k in ANYSCALE_FIELDS or k in ANYSCALE_CONTEXT_FIELDS]


def looks_foreign(data: object, near_miss: Callable[[str], object]) -> list[str]:
    """The keys of `data` that are neither runtime_env fields, nor near-misses of one
    (`near_miss(key)` is not None: a typo, an alias, a misplaced sub-key), nor Anyscale's, nor
    `x-` anchor holders, when they are most of the mapping (RTE108); else []."""
    if not isinstance(data, Mapping):
        return []
    anyscale = set(anyscale_keys(data))
    foreign = [k for k in data if isinstance(k, str) and k not in model.ALL_TOP_LEVEL_KEYS
               and k != "self" and k not in anyscale and not k.startswith("x-")
               and near_miss(k) is None]
    others = len(data) - len(foreign)
    if len(foreign) >= _MIN_FOREIGN and len(foreign) > _FOREIGN_RATIO * others:
        return foreign
    return []


def anyscale_fields(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    for key in anyscale_keys(ctx.data):
        if key == "upload_path":
            message = ("`upload_path` is Anyscale's (where `anyscale` uploads a local "
                       "working_dir): Ray ignores it and uploads working_dir to the cluster")
        else:
            message = (f"`{key}` is an Anyscale job/service field: Ray ignores it in a "
                       "runtime_env (kept as an unknown plugin)")
        yield ctx.diag("RTE109", message, (key,),
                       hint="`anyscale job submit -f` and `anyscale service deploy -f` read "
                       "it; for `ray job submit --runtime-env` or ray.init, leave it out")


CHECKS = (anyscale_fields,)

"""Serve configs checked by rtenv's own table of Serve's structure, without Ray: the keys each
level has, where runtime_envs may sit, and (when Serve's schema cannot be imported, as in most CI
jobs) the required keys and shapes Serve's schema refuses.

- RTE180: what Serve's schema would refuse (a missing `applications` or `import_path`, a
  deployment without `name`, a malformed import path, two applications of one name), found
  by this table only when `ray.serve.schema` is not importable; serve_schema.py runs Serve's
  own schema otherwise;
- RTE183: a runtime_env where Serve drops it without a word (beside `ray_actor_options` in a
  deployment, at the top of the config);
- RTE184: a key Serve does not know at its level (Serve's pydantic models ignore it);
- RTE185: the single-application format of old `serve build` (top-level `import_path`), which
  `serve deploy` on Ray 2.60 refuses.

`LEVELS` is Ray Serve 2.60.0's schema (`ray.serve.schema`): tests/core/lint/test_serve_schema.py
compares it with the installed models' fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rtenv_cli.core.lint.context import diag_at
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.spec.forms import ServeConfig
from rtenv_cli.core.spec.loader import Positions

# level -> (its keys, the required ones); names of Serve 2.60.0's pydantic models in comments
LEVELS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "config": (frozenset({  # ServeDeploySchema
        "proxy_location", "http_options", "grpc_options", "controller_options",
        "logging_config", "tracing_config", "applications", "target_capacity"}),
        frozenset({"applications"})),
    "application": (frozenset({  # ServeApplicationSchema
        "name", "route_prefix", "import_path", "runtime_env", "host", "port", "deployments",
        "autoscaling_policy", "args", "logging_config", "external_scaler_enabled"}),
        frozenset({"import_path"})),
    "deployment": (frozenset({  # DeploymentSchema
        "name", "num_replicas", "max_ongoing_requests", "max_queued_requests",
        "backpressure_config", "user_config", "autoscaling_config",
        "graceful_shutdown_wait_loop_s", "graceful_shutdown_timeout_s", "health_check_period_s",
        "health_check_timeout_s", "ray_actor_options", "placement_group_bundles",
        "placement_group_strategy", "placement_group_bundle_label_selector",
        "max_replicas_per_node", "logging_config", "request_router_config",
        "gang_scheduling_config", "deployment_actors", "rolling_update_percentage",
        "max_surge_percent"}), frozenset({"name"})),
    "ray_actor_options": (frozenset({  # RayActorOptionsSchema
        "runtime_env", "num_cpus", "num_gpus", "memory", "resources", "accelerator_type",
        "label_selector", "fallback_strategy"}), frozenset()),
    "http_options": (frozenset({  # HTTPOptionsSchema
        "host", "port", "root_path", "request_timeout_s", "keep_alive_timeout_s", "ssl_keyfile",
        "ssl_certfile", "ssl_keyfile_password", "ssl_ca_certs"}), frozenset()),
    "grpc_options": (frozenset({  # gRPCOptionsSchema
        "port", "grpc_servicer_functions", "request_timeout_s", "enable_reflection"}),
        frozenset()),
}
_DOCS = "https://docs.ray.io/en/latest/serve/production-guide/config.html"


def check(config: ServeConfig, positions: Positions, *, shapes: bool) -> list[Diagnostic]:
    """Findings of one Serve config; `shapes`: also what Serve's schema would refuse (when the
    schema itself cannot run here)."""
    checker = _Checker(positions, shapes, config.origin == "anyscale")
    data = config.data
    if config.single_app:
        checker.application(data, config.prefix)
    else:
        checker.config(data, config.prefix)
    return checker.out


class _Checker:
    def __init__(self, positions: Positions, shapes: bool, anyscale: bool) -> None:
        self.positions = positions
        self.shapes = shapes
        self.anyscale = anyscale  # Anyscale's own keys sit beside Serve's: not reported
        self.out: list[Diagnostic] = []

    def refuse(self, message: str, path: tuple[Any, ...], hint: str) -> None:
        if self.shapes:
            self.out.append(diag_at(self.positions, "RTE180", "Serve's schema refuses this "
                                    f"(rtenv's check of Serve's structure): {message}", path,
                                    hint=hint, ray_error=True))

    def unknown(self, data: dict[Any, Any], level: str, path: tuple[Any, ...]) -> None:
        from rtenv_cli.core.lint.rules.keys import suggest

        known, required = LEVELS[level]
        for key in data:
            if not isinstance(key, str) or key in known or (self.anyscale and level == "config"):
                continue
            if key == "runtime_env":
                continue  # RTE183 says where it belongs
            guess = suggest(key, tuple(sorted(known)))
            self.out.append(diag_at(
                self.positions, "RTE184", f"unknown {level.replace('_', ' ')} key `{key}`: "
                "Serve ignores it without a word", (*path, key),
                hint=f"did you mean `{guess}`?" if guess else
                f"{level.replace('_', ' ')} keys: " + ", ".join(sorted(known))))
        for key in sorted(required - set(data)):
            self.refuse(f"`{key}` is required in each {level.replace('_', ' ')}", path,
                        hint=f"add `{key}:`; see {_DOCS}")

    def config(self, data: Any, path: tuple[Any, ...]) -> None:
        if not isinstance(data, dict):
            self.refuse("a Serve config is a mapping with `applications:`", path, _DOCS)
            return
        self.unknown(data, "config", path)
        if "runtime_env" in data:
            self.out.append(diag_at(
                self.positions, "RTE183", "a top-level `runtime_env` of a Serve config is "
                "dropped: Serve reads runtime_envs per application and per deployment only",
                (*path, "runtime_env"), hint="move it under each application "
                "(`applications[].runtime_env`), where Serve applies it"))
        for key in ("http_options", "grpc_options"):
            if isinstance(data.get(key), dict):
                self.unknown(data[key], key, (*path, key))
        apps = data.get("applications")
        if "applications" in data and not isinstance(apps, list):
            self.refuse("`applications` must be a list", (*path, "applications"),
                        hint="write each application as a `- name: ...` item")
            return
        names: dict[str, int] = {}
        for i, app in enumerate(apps or []):
            self.application(app, (*path, "applications", i))
            name = app.get("name", "default") if isinstance(app, dict) else None
            if isinstance(name, str) and name in names:
                self.refuse(f"two applications are named `{name}`",
                            (*path, "applications", i, "name"),
                            hint="give each application a unique `name:`")
            elif isinstance(name, str):
                names[name] = i

    def application(self, app: Any, path: tuple[Any, ...]) -> None:
        if not isinstance(app, dict):
            self.refuse("an application is a mapping (`import_path:`, `name:`, ...)", path,
                        hint="write the application's fields under its `- ` item")
            return
        self.unknown(app, "application", path)
        if "import_path" in app:
            problem = _import_path_problem(app["import_path"])
            if problem:
                self.refuse(problem, (*path, "import_path"),
                            hint="write `module:attribute`, e.g. `serve_app:app`")
        deployments = app.get("deployments")
        if "deployments" in app and deployments is not None and \
                not isinstance(deployments, list):
            self.refuse("`deployments` must be a list", (*path, "deployments"),
                        hint="write each deployment as a `- name: ...` item")
            return
        for j, deployment in enumerate(deployments or []):
            self.deployment(deployment, (*path, "deployments", j))

    def deployment(self, deployment: Any, path: tuple[Any, ...]) -> None:
        if not isinstance(deployment, dict):
            self.refuse("a deployment is a mapping with `name:`", path,
                        hint="write the deployment's options under its `- name:` item")
            return
        self.unknown(deployment, "deployment", path)
        if "runtime_env" in deployment:
            self.out.append(diag_at(
                self.positions, "RTE183", "a deployment's `runtime_env` beside "
                "`ray_actor_options` is dropped: Serve reads it only inside "
                "`ray_actor_options`", (*path, "runtime_env"),
                hint="indent it under `ray_actor_options:` (`ray_actor_options: {runtime_env: "
                "...}`)"))
        options = deployment.get("ray_actor_options")
        if isinstance(options, dict):
            self.unknown(options, "ray_actor_options", (*path, "ray_actor_options"))
        elif options is not None:
            self.refuse("`ray_actor_options` must be a mapping", (*path, "ray_actor_options"),
                        hint="write `ray_actor_options: {num_cpus: 1, runtime_env: {...}}`")


def _import_path_problem(value: Any) -> str | None:
    """Serve's `import_path_format_valid`, in rtenv's words."""
    if not isinstance(value, str):
        return f"import_path must be a string, not {type(value).__name__}"
    sep = ":" if ":" in value else "."
    if sep == ":" and value.count(":") > 1:
        return f"import_path `{value}` may have at most one colon"
    if sep not in value:
        return (f"import_path `{value}` needs a colon or dot between the module and the "
                "application")
    if value.rfind(sep) in (0, len(value) - 1):
        return f"import_path `{value}` may not start or end with `{sep}`"
    return None


def old_format(config: ServeConfig, positions: Positions) -> Iterator[Diagnostic]:
    """RTE185 for a config in the single-application format of old `serve build`."""
    yield diag_at(positions, "RTE185", "this is the single-application Serve config of old "
                  "`serve build` (`import_path` at the top, no `applications`): `serve deploy` "
                  "on Ray 2.60 refuses it (`applications`: field required)",
                  (*config.prefix, "import_path"), ray_error=True,
                  hint="nest the application under `applications:` (`applications: [{name: app, "
                  "import_path: ..., deployments: ...}]`), with `host`/`port` under "
                  "`http_options:`; `serve build` writes this format since Ray 2.6")

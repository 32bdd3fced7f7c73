"""`rtenv ray-env`: the environment variables a node's `ray start` needs for rtenv's plugin, in
the forms a shell, a JSON tool and a KubeRay spec take them."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.paths import HOME_ENV
from rtenv_cli.core.rayplugin import schema

FORMATS = ("shell", "json", "yaml")


def ray_env_vars(*, root: Path | None = None, max_size: str | None = None,
                 max_age: str | None = None) -> dict[str, str]:
    """NAME -> value to export before `ray start` on every node: the plugin (class path and
    priority), Ray's URI cache for it at 0 GB (so Ray hands each reference back at once and
    rtenv's store decides when bytes go), the store (RTENV_HOME: `--root`, else the caller's
    RTENV_HOME if set) and the store's budget."""
    env = {schema.PLUGINS_ENV: json.dumps([{"class": schema.PLUGIN_CLASS,
                                            "priority": schema.PRIORITY}]),
           schema.CACHE_SIZE_ENV: "0"}
    home = str(root.expanduser().absolute()) if root is not None else os.environ.get(HOME_ENV)
    if home:
        env[HOME_ENV] = home
    if max_size:
        from rtenv_cli.core.units import parse_size

        parse_size(max_size)  # refused here, not on every node's first build
        env[schema.MAX_SIZE_ENV] = max_size
    if max_age:
        from rtenv_cli.core.units import parse_duration

        parse_duration(max_age)
        env[schema.MAX_AGE_ENV] = max_age
    return env


def format_env(env: dict[str, str], fmt: str) -> str:
    """`export NAME=value` lines (shell), `{"env": {...}}` (json) or a KubeRay `env:` list."""
    if fmt == "shell":
        return "\n".join(f"export {k}={shlex.quote(v)}" for k, v in env.items())
    if fmt == "json":
        return json.dumps({"env": env}, indent=2)
    if fmt == "yaml":  # a JSON string is a YAML scalar: no quoting rules of our own
        return "env:\n" + "\n".join(f"- name: {k}\n  value: {json.dumps(v)}"
                                    for k, v in env.items())
    raise UsageError(f"unknown format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")

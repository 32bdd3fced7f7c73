"""Is rtenv's Ray runtime_env plugin loaded on a node?

Ray's runtime-env agent loads the plugin classes named in RAY_RUNTIME_ENV_PLUGINS (a JSON list of
`{"class": "module.Class", "priority": N}`) when `ray start` starts it; a class that does not
import stops the agent. The node scan (cache/ray_scan.py `node_facts`) reports the variable as the
node's raylet has it, which its agent inherits (read from /proc; a worker's own environment when
the raylet's cannot be read), and whether each class imports in the node's Python.
`plugin_status` judges that report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rtenv_cli.core.doctor.model import Check, fail, ok, warn

PLUGIN_PACKAGE = "rtenv_cli"  # the plugin's class path starts with it
RAY_ENV_FIX = 'run `eval "$(rtenv ray-env)"` before `ray start` on the node'


def rtenv_plugins(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plugin entries of FACTS whose class is rtenv's."""
    return [p for p in facts.get("plugins") or []
            if isinstance(p.get("class"), str) and
            p["class"].split(".", 1)[0] == PLUGIN_PACKAGE]


def plugin_status(node: Mapping[str, Any], name: str = "plugin") -> Check:
    """The verdict on one node's report (a node of `cache.ray_nodes.list_ray_nodes`)."""
    facts = node.get("facts")
    if not isinstance(facts, Mapping):
        return warn(name, "unknown: the node did not report its runtime-env agent's settings",
                    "see the node's scan error above")
    ours = rtenv_plugins(facts)
    source = "the raylet's environment (its runtime-env agent's)" \
        if facts.get("plugins_env_from") == "raylet" else \
        "a worker's environment (the raylet's could not be read)"
    if not ours:
        setting = facts.get("plugins_env")
        now = f"RAY_RUNTIME_ENV_PLUGINS={setting}" if setting else \
            "RAY_RUNTIME_ENV_PLUGINS is not set"
        return warn(name, f"not loaded: {now} in {source}", RAY_ENV_FIX)
    broken = [p for p in ours if not p.get("importable")]
    if broken:
        first = broken[0]
        return fail(name, f"{first['class']} is configured but the node's Python cannot import "
                    f"it ({first.get('error')}); Ray's runtime-env agent does not start so",
                    "pip install rtenv into the Python that runs `ray start` on the node, then "
                    "restart Ray there")
    classes = ", ".join(p["class"] for p in ours)
    version = facts.get("rtenv_version")
    return ok(name, f"loaded: {classes}" + (f" (rtenv {version})" if version else "")
              + ("" if facts.get("plugins_env_from") == "raylet" else f", read from {source}"))

"""Is rtenv's Ray runtime_env plugin loaded on a node? The doctor's check of the one verdict
(rayplugin/nodes.py `judge`, which `rtenv ray-env --check` shows too) on the node scan's facts
(cache/ray_scan.py `node_facts`): a plugin that is not configured is a warning, one that is
configured but does not import is a failure (Ray's runtime-env agent does not start so).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rtenv_cli.core.doctor.model import Check, fail, ok, warn
from rtenv_cli.core.rayplugin.nodes import BROKEN, LOADED, UNKNOWN, judge

RAY_ENV_FIX = 'run `eval "$(rtenv ray-env)"` before `ray start` on the node'


def plugin_status(node: Mapping[str, Any], name: str = "plugin") -> Check:
    """The check of one node's report (a node of `cache.ray_nodes.list_ray_nodes`)."""
    verdict = judge(node)
    if verdict.state == UNKNOWN:
        return warn(name, f"unknown: {verdict.detail}", "see the node's scan error above")
    if verdict.state == BROKEN:
        return fail(name, verdict.detail,
                    "pip install rtenv into the Python that runs `ray start` on the node, then "
                    "restart Ray there")
    if verdict.state == LOADED:
        return ok(name, f"loaded: {verdict.detail}")
    return warn(name, f"not loaded: {verdict.detail}", RAY_ENV_FIX)

"""Which nodes of a Ray cluster run rtenv's plugin. The facts come from the one node probe (the
`facts` of cache/ray_scan.py, a task pinned to each alive node that reads the environment the
node's `ray start` gave its raylet, which the runtime-env agent inherits); `judge` is the one
verdict on them, shown by `rtenv ray-env --check` and by `rtenv doctor --address`. A node
without the plugin runs `rtenv:` tasks in its base environment after one log line, so a missing
plugin must be reported, never passed over."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtenv_cli.core.rayplugin.schema import PLUGIN_CLASS, PLUGINS_ENV

LOADED, MISSING, BROKEN, UNKNOWN = "loaded", "missing", "broken", "unknown"
SOURCES = {"raylet": "the raylet's environment (its runtime-env agent's)",
           "worker": "a worker's environment (the raylet's could not be read)"}


@dataclass(frozen=True)
class Verdict:
    """Whether a node's runtime-env agent loads the plugin: `loaded`, `missing` (not in the
    node's RAY_RUNTIME_ENV_PLUGINS), `broken` (listed, but the node's Python cannot import it:
    Ray's agent then does not start) or `unknown` (the node did not report); `detail` says why."""

    state: str
    detail: str
    importable: bool | None = None

    @property
    def loaded(self) -> bool:
        return self.state == LOADED


def judge(node: Mapping[str, Any], class_path: str = PLUGIN_CLASS) -> Verdict:
    """The verdict on one node of the node scan (`cache.ray_nodes`)."""
    if node.get("error"):
        return Verdict(UNKNOWN, f"the node scan failed: {node['error']}")
    facts = node.get("facts")
    if not isinstance(facts, Mapping):
        return Verdict(UNKNOWN, "the node did not report its runtime-env agent's settings")
    source = SOURCES.get(str(facts.get("plugins_env_from")), SOURCES["worker"])
    listed = [p for p in facts.get("plugins") or [] if p.get("class") == class_path]
    if not listed:
        setting = facts.get("plugins_env")
        now = f"{PLUGINS_ENV}={setting}" if setting else f"{PLUGINS_ENV} is not set"
        return Verdict(MISSING, f"{now} in {source}")
    if not listed[0].get("importable"):
        return Verdict(BROKEN, f"{class_path} is configured but the node's Python cannot import "
                       f"it ({listed[0].get('error')}); Ray's runtime-env agent does not start so",
                       importable=False)
    version = facts.get("rtenv_version")
    return Verdict(LOADED, class_path + (f" (rtenv {version})" if version else "")
                   + ("" if facts.get("plugins_env_from") == "raylet" else f", read from {source}"),
                   importable=True)


@dataclass(frozen=True)
class PluginStatus:
    address: str
    nodes: tuple[dict[str, Any], ...]

    @property
    def missing(self) -> tuple[dict[str, Any], ...]:
        """The nodes whose agent does not load the plugin (each with its `reason`)."""
        return tuple(n for n in self.nodes if not n.get("loaded"))

    @property
    def ok(self) -> bool:
        return bool(self.nodes) and not self.missing

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "class": PLUGIN_CLASS, "ok": self.ok,
                "nodes": list(self.nodes),
                "missing": [n["node_id"] for n in self.missing]}


def node_status(node: Mapping[str, Any], class_path: str = PLUGIN_CLASS) -> dict[str, Any]:
    """One node of `rtenv ray-env --check`: the verdict and the facts it rests on."""
    verdict = judge(node, class_path)
    facts = node.get("facts") or {}
    return {"node_id": node["node_id"], "node_ip": node.get("node_ip", ""),
            "loaded": verdict.loaded, "state": verdict.state, "importable": verdict.importable,
            "reason": None if verdict.loaded else verdict.detail,
            "source": facts.get("plugins_env_from"), "plugins": facts.get("plugins_env"),
            "cache_size_gb": facts.get("rtenv_cache_size_gb"),
            "rtenv_home": facts.get("rtenv_home"), "rtenv_version": facts.get("rtenv_version"),
            "python": facts.get("python_executable"), "raylet_pid": facts.get("raylet_pid")}


def plugin_status(address: str, *, class_path: str = PLUGIN_CLASS,
                  timeout: float = 180) -> PluginStatus:
    """Per alive node of the cluster at `address` (a dashboard URL: as a job; a GCS address:
    as a driver), whether its runtime-env agent loads `class_path`."""
    from rtenv_cli.core.cache.ray_nodes import node_facts

    return PluginStatus(address, tuple(node_status(n, class_path)
                                       for n in node_facts(address, timeout=timeout)))


"""Which nodes of a Ray cluster run rtenv's plugin: a task pinned to each alive node reads the
environment its runtime-env agent was started with (plugin_probe.py, sent as source). A node
without it runs `rtenv:` tasks in its base environment after one log line, so a missing plugin
must be reported, never passed over."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import OperationError
from rtenv_cli.core.rayplugin.schema import PLUGIN_CLASS

MARKER = "RTENV_PLUGIN "
ERROR_MARKER = "RTENV_PLUGIN_ERROR "


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


def plugin_status(address: str, *, class_path: str = PLUGIN_CLASS,
                  timeout: float = 180) -> PluginStatus:
    """Per alive node of the cluster at `address` (a dashboard URL: as a job; a GCS address:
    as a driver), whether its runtime-env agent loads `class_path`."""
    from rtenv_cli.core.cache.ray_nodes import _via_driver, _via_job

    script = Path(__file__).with_name("plugin_probe.py").read_text(encoding="utf-8")
    run = _via_job if address.startswith(("http://", "https://")) else _via_driver
    out = run(address, [class_path], timeout, script)
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            return PluginStatus(address, tuple(json.loads(line[len(MARKER):])["nodes"]))
        if line.startswith(ERROR_MARKER):
            raise OperationError(line[len(ERROR_MARKER):],
                                 hint="is the Ray cluster reachable at this address?")
    raise OperationError("the plugin check printed no result",
                         hint="run it again with the cluster's dashboard URL")

"""Whether a cluster takes trees: every alive node's runtime-env agent loads rtenv's plugin,
which announces itself (`n:<node>`, rayplugin/engine.py) when Ray constructs it. Two KV calls,
no driver: a push can afford to ask every time."""

from __future__ import annotations

from dataclasses import dataclass

from rtenv_cli.core.transport.ray_kv import RayKV


@dataclass(frozen=True)
class Readiness:
    nodes: dict[str, str]  # alive node id -> address
    missing: tuple[str, ...]  # alive nodes that did not announce the plugin

    @property
    def ok(self) -> bool:
        return bool(self.nodes) and not self.missing

    def why_not(self) -> str:
        """One line: why a push takes the zip path."""
        if not self.nodes:
            return "the cluster reports no alive node"
        names = ", ".join(f"{n[:12]} ({self.nodes[n]})" for n in self.missing[:3])
        more = f" and {len(self.missing) - 3} more" if len(self.missing) > 3 else ""  # noqa: PLR2004
        return (f"{len(self.missing)} of {len(self.nodes)} nodes do not load rtenv's plugin: "
                f"{names}{more} (`rtenv ray-env` on each node's `ray start`; check with "
                f"`rtenv ray-env --check`)")


def readiness(kv: RayKV) -> Readiness:
    nodes = kv.alive_nodes()
    announced = {k.removeprefix("n:") for k in kv.keys("n:")}
    return Readiness(nodes, tuple(sorted(n for n in nodes if n not in announced)))

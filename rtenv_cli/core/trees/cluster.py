"""Whether a cluster takes trees: every alive node's runtime-env agent loads rtenv's plugin,
which announces itself (`n:<node>`, rayplugin/engine.py) when Ray constructs it. Two KV calls,
no driver: a push can afford to ask every time."""

from __future__ import annotations

from dataclasses import dataclass

from rtenv_cli.core.transport.ray_kv import RayKV

BUILTIN_PRIORITY = 10  # Ray's built-in plugins' (nsight's among them: rayplugin/schema.py)


@dataclass(frozen=True)
class Readiness:
    nodes: dict[str, str]  # alive node id -> address
    missing: tuple[str, ...]  # alive nodes that did not announce the plugin
    guarded: bool = False  # every node's plugin removes push's guard (guard.GUARD_FIELD)

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


def readiness(kv: RayKV, nodes: dict[str, str] | None = None) -> Readiness:
    """`nodes`: the alive nodes when the caller just listed them."""
    import json

    nodes = kv.alive_nodes() if nodes is None else nodes
    keys = [f"n:{n}" for n in nodes]
    announced = kv.multi_get(keys) if keys else {}
    missing = tuple(sorted(n for n in nodes if f"n:{n}" not in announced))

    def guards(raw: bytes) -> bool:
        try:
            return int(json.loads(raw).get("priority", BUILTIN_PRIORITY)) < BUILTIN_PRIORITY
        except (ValueError, TypeError, AttributeError):
            return False

    return Readiness(nodes, missing, bool(announced) and all(map(guards, announced.values())))


def recheck(kv: RayKV, last: Readiness) -> Readiness | None:
    """For a running `push --watch`: the cluster's readiness now, or None when it cannot have
    changed since `last`. One call lists the alive nodes; the announcements are read again only
    when that set changed or `last` missed one (a node's plugin announces itself a moment after
    the node registers), so a watch can afford to ask every few seconds."""
    nodes = kv.alive_nodes()
    if last.ok and nodes.keys() == last.nodes.keys():
        return None
    return readiness(kv, nodes)

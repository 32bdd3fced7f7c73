"""Whether a cluster takes trees: every alive node's runtime-env agent loads rtenv's plugin,
which announces itself (`n:<node>`, rayplugin/engine.py) when Ray constructs it. Two KV calls,
no driver: a push can afford to ask every time."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rtenv_cli.core.transport.ray_kv import RayKV

BUILTIN_PRIORITY = 10  # Ray's built-in plugins' (nsight's among them: rayplugin/schema.py)
# A node's plugin announces itself once Ray's agent has built it, a moment after the node
# registers, and a head just started reports no alive node for a moment: a push right after
# `ray start` waits this long for either (`settled`) rather than take the zip path for good.
STARTING_S = 5.0
_POLL_S = 0.2


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


def settled(kv: RayKV, *, wait_s: float = STARTING_S,
            sleep: Callable[[float], None] = time.sleep,
            clock: Callable[[], float] = time.time) -> Readiness:
    """`readiness`, asked again while the cluster may still be starting, for at most `wait_s`:
    while it reports no alive node, or a node that has not announced the plugin started less
    than `wait_s` ago (by its own start time, so a node long up without the plugin costs no
    wait)."""
    deadline = clock() + wait_s
    while True:
        starts = kv.alive_node_starts()
        ready = readiness(kv, {n: address for n, (address, _) in starts.items()})
        now = clock()
        if ready.ok or now >= deadline:
            return ready
        if ready.nodes and all(now * 1000 - starts[n][1] >= wait_s * 1000
                               for n in ready.missing):
            return ready
        sleep(_POLL_S)


def recheck(kv: RayKV, last: Readiness) -> Readiness | None:
    """For a running `push --watch`: the cluster's readiness now, or None when it cannot have
    changed since `last`. One call lists the alive nodes; the announcements are read again only
    when that set changed or `last` missed one (a node's plugin announces itself a moment after
    the node registers), so a watch can afford to ask every few seconds."""
    nodes = kv.alive_nodes()
    if last.ok and nodes.keys() == last.nodes.keys():
        return None
    return readiness(kv, nodes)

"""Collect the trees of a cluster's KV that nothing needs (Ray never deletes a plugin's keys).

A manifest is kept while an alive node's plugin holds its tree (`r:<manifest>:<node>`: a live
worker uses it) or it was pushed within the grace period (`t:<manifest>`: a job may be about to
start on it), and so is every manifest of its delta chain. A pack is kept while a kept manifest
names it, or while it is younger than the grace period (a push in progress writes its packs
before its manifest). Everything else goes: manifests first, then packs (index, then
contents), so no kept manifest ever names a missing content. Keys of dead nodes (`n:`, `r:`)
go too.

Ray's count alone is not enough: measured with 10 runtime_envs on one manifest started at once,
a raylet sent 24 increases and 21 decreases, so Ray kept 3 runtime_envs (and the URI) referenced
after every worker had exited, and with Ray's URI cache above 0 GB an unused URI stays cached
without `delete_uri`. So a node's key also follows its processes: the plugin drops it once no
process of the node has used the tree for a lease (rayplugin/engine.py), and puts it back when
one does.

One race is left by design: a push that reuses a content of a pack nothing references, older
than the grace period, while a gc deletes that pack. The push checks that its manifest's packs
still exist after writing it (publish.py); a node that misses one says to push again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rtenv_cli.core.transport.ray_kv import RayKV
from rtenv_cli.core.trees.manifest import TreeFormatError, decode, decode_index

GRACE_S = 600.0  # as Ray's temporary pin of an uploaded package (RAY_RUNTIME_ENV_TEMPORARY_...)
_BATCH = 64


@dataclass(frozen=True)
class TreeGc:
    address: str
    dry_run: bool
    manifests_kept: int
    manifests_removed: tuple[str, ...]
    packs_kept: int
    packs_removed: tuple[str, ...]
    bytes_removed: int  # the removed packs' contents
    stale_keys: int  # n:/r: keys of dead nodes, t: keys without a manifest
    held: tuple[str, ...] = field(default=())  # manifests an alive node's plugin holds

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "dry_run": self.dry_run,
                "manifests_kept": self.manifests_kept,
                "manifests_removed": list(self.manifests_removed),
                "packs_kept": self.packs_kept, "packs_removed": list(self.packs_removed),
                "bytes_removed": self.bytes_removed, "stale_keys": self.stale_keys,
                "held": list(self.held)}


def _values(kv: RayKV, keys: list[str]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for i in range(0, len(keys), _BATCH):
        out.update(kv.multi_get(keys[i:i + _BATCH]))
    return out


def held_manifests(kv: RayKV, alive: set[str]) -> dict[str, list[str]]:
    """manifest id -> the alive nodes whose plugin holds its tree."""
    out: dict[str, list[str]] = {}
    for key in kv.keys("r:"):
        _r, ident, node = [*key.split(":", 2), "", ""][:3]
        if node in alive:
            out.setdefault(ident, []).append(node)
    return out


def tree_refs(kv: RayKV) -> tuple[dict[str, Any], ...]:
    """Each node's reference to a tree (`r:<manifest>:<node>`): the manifest, the node, whether
    the node is alive (a dead node's key goes at the next gc) and when it was taken."""
    alive = set(kv.alive_nodes())
    out = []
    for key in sorted(kv.keys("r:")):
        _r, ident, node = [*key.split(":", 2), "", ""][:3]
        try:
            since: float | None = float(kv.get(key) or b"")
        except ValueError:
            since = None
        out.append({"manifest": ident, "node_id": node, "alive": node in alive,
                    "since": since})
    return tuple(out)


def collect(kv: RayKV, *, grace_s: float = GRACE_S, dry_run: bool = False,
            now: float | None = None) -> TreeGc:
    now = time.time() if now is None else now
    alive = set(kv.alive_nodes())
    held = held_manifests(kv, alive)
    manifests = {k.removeprefix("m:") for k in kv.keys("m:")}
    pushed = {k.removeprefix("t:"): v for k, v in _values(kv, list(kv.keys("t:"))).items()}
    values = {k.removeprefix("m:"): v for k, v in _values(kv, [f"m:{m}" for m in manifests])
              .items()}
    docs: dict[str, dict[str, Any]] = {}
    for ident, raw in values.items():
        try:
            docs[ident] = decode(raw)
        except TreeFormatError:
            continue  # not ours to judge: kept

    def recent(ident: str) -> bool:
        try:
            return now - float(pushed.get(ident, b"0")) < grace_s
        except ValueError:
            return False

    keep: set[str] = set()
    todo = [m for m in manifests if m in held or recent(m) or m not in docs]
    while todo:
        ident = todo.pop()
        if ident in keep:
            continue
        keep.add(ident)
        base = docs.get(ident, {}).get("base")
        if base:
            todo.append(base)
    packs_used = {p for m in keep for p in docs.get(m, {}).get("packs", ())}
    drop = sorted(manifests - keep)
    packs = [k.removeprefix("x:") for k in kv.keys("x:")]
    indexes = _values(kv, [f"x:{p}" for p in packs if p not in packs_used])
    drop_packs, freed = [], 0
    for key, raw in indexes.items():
        try:
            t, files = decode_index(raw)
        except TreeFormatError:
            continue
        if now - t >= grace_s:
            drop_packs.append(key.removeprefix("x:"))
            freed += sum(size for _d, _o, size in files)
    stale = [k for k in kv.keys("n:") if k.removeprefix("n:") not in alive]
    stale += [k for k in kv.keys("r:") if k.rsplit(":", 1)[-1] not in alive]
    stale += [f"t:{m}" for m in pushed if m not in manifests and not recent(m)]
    if not dry_run:
        for ident in drop:
            kv.delete(f"m:{ident}")
            kv.delete(f"t:{ident}")
        for pack in drop_packs:
            kv.delete(f"x:{pack}")
            kv.delete(f"p:{pack}")
        for key in stale:
            kv.delete(key)
    return TreeGc(kv.address, dry_run, len(keep), tuple(drop), len(packs) - len(drop_packs),
                  tuple(sorted(drop_packs)), freed, len(stale), tuple(sorted(held)))

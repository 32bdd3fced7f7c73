"""`rtenv cache ls` filters: which entries, of which caches, on which nodes.

One `CacheFilter` applies to every listing `cache ls` makes: the embedded store or an agent
(`CacheListing`) and a Ray cluster's nodes (`RayNodesListing`: Ray's own session caches and each
node's rtenv store). Totals are those of what is shown.

- `kinds`: entries of these kinds (Ray's cache folders carry the same names: working_dir,
  py_modules, pip, uv, conda, java_jars).
- `use`: `in-use` keeps what something holds (a live reference, or a pin of a fresh upload),
  `unused` what nothing holds (what `cache gc` may remove). A Ray cache entry counts as used
  while its node's runtime-env agent reports a reference to it.
- `nodes` (a Ray cluster only): a node by its ID, or a prefix of it as `cache ls` prints it, or
  by its IP address.
- `only` (a Ray cluster only): `ray` (Ray's own caches, per session) or `rtenv` (the stores of
  rtenv's plugin, and the trees its nodes hold).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import UsageError

if TYPE_CHECKING:
    from rtenv_cli.core.cache.ls import CacheListing
    from rtenv_cli.core.cache.ray_nodes import RayNodesListing
    from rtenv_cli.core.store.index import Entry

USES = ("in-use", "unused")
PARTS = ("ray", "rtenv")
MIN_NODE_PREFIX = 4  # hex digits: fewer would pick nodes by chance


@dataclass(frozen=True)
class CacheFilter:
    kinds: tuple[str, ...] = ()
    use: str | None = None  # None | in-use | unused
    nodes: tuple[str, ...] = ()
    only: str | None = None  # None | ray | rtenv

    @property
    def cluster_only(self) -> bool:
        """Whether it names what only a Ray cluster has (nodes, Ray's or rtenv's part)."""
        return bool(self.nodes) or self.only is not None

    def keeps(self, kind: str, in_use: bool) -> bool:
        if self.kinds and kind not in self.kinds:
            return False
        return self.use is None or (self.use == "in-use") == in_use

    def shows(self, part: str) -> bool:
        return self.only is None or self.only == part

    def listing(self, listing: CacheListing) -> CacheListing:
        """`listing` (a store's, an agent's) with only the entries kept."""
        return dataclasses.replace(listing, entries=tuple(
            e for e in listing.entries if self.keeps(e.kind, entry_in_use(e))))

    def ray_nodes(self, listing: RayNodesListing) -> RayNodesListing:
        """`listing` with only the nodes, parts and entries kept; a `--node` that names no
        node of the cluster is a usage error that lists them."""
        nodes = [n for n in listing.nodes if self._node_kept(n)]
        for wanted in self.nodes:
            if not any(_node_matches(n, wanted) for n in listing.nodes):
                known = ", ".join(f"{n['node_id'][:12]} ({n['node_ip']})" for n in listing.nodes)
                raise UsageError(f"--node {wanted}: no such node in {listing.address}",
                                 hint=f"its nodes: {known or 'none'}")
        kept = tuple(self._node(n) for n in nodes)
        refs = listing.tree_refs
        if refs is not None and self.nodes:
            ids = {n["node_id"] for n in nodes}
            refs = tuple(r for r in refs if r["node_id"] in ids)
        return dataclasses.replace(listing, nodes=kept, tree_refs=refs, only=self.only)

    def _node_kept(self, node: dict[str, Any]) -> bool:
        return not self.nodes or any(_node_matches(node, w) for w in self.nodes)

    def _node(self, node: dict[str, Any]) -> dict[str, Any]:
        out = dict(node)
        if not self.shows("ray"):
            out["sessions"] = []
        else:
            out["sessions"] = [
                {**s, "entries": [e for e in s["entries"]
                                  if self.keeps(e["kind"], bool(e.get("refs")))]}
                for s in node["sessions"]]
        store = node.get("rtenv")
        if not self.shows("rtenv"):
            out.pop("rtenv", None)
        elif isinstance(store, dict) and "entries" in store:
            out["rtenv"] = {**store, "entries": [
                e for e in store["entries"]
                if self.keeps(e["kind"], bool(e["refs"]) or bool(e.get("pinned")))]}
        return out


def entry_in_use(entry: Entry) -> bool:
    """Held by something: a live reference, or the pin of a fresh upload (gc keeps both)."""
    return entry.refs > 0 or entry.pinned


def _node_matches(node: dict[str, Any], wanted: str) -> bool:
    if node.get("node_ip") == wanted:
        return True
    node_id = str(node.get("node_id", "")).lower()
    return len(wanted) >= MIN_NODE_PREFIX and node_id.startswith(wanted.lower())

"""cache ls filters on a store's listing and on a Ray cluster's (as the scan reports them)."""

from __future__ import annotations

import pytest

from rtenv_cli.core.cache.filters import CacheFilter
from rtenv_cli.core.cache.ls import CacheListing
from rtenv_cli.core.cache.ray_nodes import RayNodesListing
from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.store.index import Entry

NODE_A = "1ce3ebbf38bc" + "0" * 44
NODE_B = "9f00aa11bb22" + "1" * 44


def _entry(label: str, kind: str, refs: int = 0, pinned: bool = False) -> Entry:
    return Entry(key=label, kind=kind, uri=f"{kind}://{label}", label=label, path="",
                 size_bytes=10, created_at=1.0, last_used_at=1.0, refs=refs, pinned=pinned)


def _store(*entries: Entry) -> dict[str, object]:
    return CacheListing("local store /s", entries).to_dict()


def _node(node_id: str, ip: str) -> dict[str, object]:
    session = {"name": "session_x", "path": "/tmp/ray/session_x", "live": True,
               "size_bytes": 20,
               "entries": [{"kind": "pip", "name": "p1", "size_bytes": 10, "refs": 1,
                            "state": "referenced"},
                           {"kind": "working_dir", "name": "w1", "size_bytes": 10, "refs": 0,
                            "state": "cached, unreferenced"}]}
    return {"node_id": node_id, "node_ip": ip, "temp_dir": "/tmp/ray", "sessions": [session],
            "rtenv": _store(_entry("six==1.16.0", "pip"), _entry("held", "uv", refs=2),
                            _entry("fresh", "package", pinned=True))}


def _cluster() -> RayNodesListing:
    refs = ({"manifest": "m" * 64, "node_id": NODE_A, "alive": True},
            {"manifest": "n" * 64, "node_id": NODE_B, "alive": True})
    return RayNodesListing("127.0.0.1:6379", (_node(NODE_A, "10.0.0.1"),
                                              _node(NODE_B, "10.0.0.2")), tree_refs=refs)


def test_a_store_listing_by_kind_and_use() -> None:
    listing = CacheListing("s", (_entry("a", "pip"), _entry("b", "uv", refs=1),
                                 _entry("c", "package", pinned=True)))
    assert [e.label for e in CacheFilter(use="unused").listing(listing).entries] == ["a"]
    # a pinned upload is held: gc keeps it, so it is in use
    assert [e.label for e in CacheFilter(use="in-use").listing(listing).entries] == ["b", "c"]
    assert [e.label for e in CacheFilter(kinds=("uv", "pip"), use="in-use")
            .listing(listing).entries] == ["b"]
    assert CacheFilter().listing(listing) == listing


def test_a_node_by_id_prefix_or_ip_with_its_trees() -> None:
    for wanted in ("1ce3", "1CE3EBBF38BC", "10.0.0.1", NODE_A):
        got = CacheFilter(nodes=(wanted,)).ray_nodes(_cluster())
        assert [n["node_id"] for n in got.nodes] == [NODE_A], wanted
        assert [r["node_id"] for r in got.tree_refs or ()] == [NODE_A]
    both = CacheFilter(nodes=("10.0.0.1", "9f00")).ray_nodes(_cluster())
    assert len(both.nodes) == 2


def test_a_node_that_is_not_there_is_a_usage_error_naming_the_nodes() -> None:
    for wanted in ("abcd", "1ce", "10.0.0.9"):  # 3 hex digits are too few to pick a node
        with pytest.raises(UsageError) as exc:
            CacheFilter(nodes=(wanted,)).ray_nodes(_cluster())
        assert "1ce3ebbf38bc (10.0.0.1)" in (exc.value.hint or "")


def test_only_rtenv_drops_rays_caches_and_filters_the_stores() -> None:
    got = CacheFilter(only="rtenv", kinds=("pip", "uv"), use="unused").ray_nodes(_cluster())
    assert got.only == "rtenv"
    assert all(n["sessions"] == [] for n in got.nodes)
    stores = got.rtenv_stores()
    assert [[e.label for e in store.entries] for _, store in stores] == [["six==1.16.0"]] * 2
    assert got.to_dict()["totals"]["live_bytes"] == 0


def test_only_ray_drops_the_stores_and_filters_rays_entries() -> None:
    got = CacheFilter(only="ray", use="in-use").ray_nodes(_cluster())
    assert got.rtenv_stores() == ()
    assert [[e["name"] for e in n["sessions"][0]["entries"]] for n in got.nodes] == [["p1"]] * 2
    # the input is left as it was (the filter copies what it narrows)
    assert len(_cluster().nodes[0]["sessions"][0]["entries"]) == 2

"""Where `rtenv cache` looks: the embedded store (default), an rtenv agent (`--agent URL`, or
`--address` naming one), or a Ray cluster's nodes (`--address` of its dashboard or GCS)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from rtenv_cli.core.cache import build_cache
from rtenv_cli.core.cache.gc import GcResult, plan_gc, prune_uv_cache, run_gc
from rtenv_cli.core.cache.ls import CacheListing, list_store
from rtenv_cli.core.transport.resolve import Address, AddressKind, resolve_address


class CacheBackend(Protocol):
    def listing(self, kinds: tuple[str, ...] = ()) -> CacheListing: ...

    def gc(self, *, dry_run: bool, older_than_s: float | None = None,
           keep_storage: int | None = None, kinds: tuple[str, ...] = (),
           purge: bool = False) -> GcResult: ...


class LocalBackend:
    def __init__(self, root: Any = None) -> None:
        from rtenv_cli.core.store.store import Store

        self.store = Store(root)

    def listing(self, kinds: tuple[str, ...] = ()) -> CacheListing:
        from dataclasses import replace

        listing = list_store(self.store, kinds)
        if kinds and build_cache.KIND not in kinds:
            return listing
        return replace(listing, entries=(*listing.entries, *build_cache.entries()))

    def gc(self, *, dry_run: bool, older_than_s: float | None = None,
           keep_storage: int | None = None, kinds: tuple[str, ...] = (),
           purge: bool = False) -> GcResult:
        self.store.index.prune_refs()
        plan = plan_gc([*self.store.index.all(), *build_cache.entries()],
                       older_than_s=older_than_s, keep_storage=keep_storage, kinds=kinds,
                       purge=purge)
        result = run_gc(self.store, plan, dry_run=dry_run)
        if purge and not dry_run:
            result.extra["uv_cache_pruned_bytes"] = prune_uv_cache(self.store)
        return result


class AgentBackend:
    def __init__(self, url: str, token: str | None = None) -> None:
        from rtenv_cli.core.transport.agent_http import AgentClient

        self.client = AgentClient(url, token)

    def listing(self, kinds: tuple[str, ...] = ()) -> CacheListing:
        return CacheListing.from_dict(self.client.cache(kinds))

    def gc(self, *, dry_run: bool, older_than_s: float | None = None,
           keep_storage: int | None = None, kinds: tuple[str, ...] = (),
           purge: bool = False) -> GcResult:
        return GcResult.from_dict(self.client.gc(
            dry_run=dry_run, older_than_s=older_than_s, keep_storage=keep_storage,
            kinds=list(kinds), purge=purge))


def cache_address(agent: str | None, address: str | None,
                  env: Mapping[str, str] | None = None) -> Address:
    """What `rtenv cache` works on: `--agent URL` as given, else what `--address` (or
    RAY_ADDRESS) names by the one resolver push and run use, else the embedded store."""
    if agent:
        return Address(AddressKind.AGENT, agent.rstrip("/"))
    if not address:
        return Address(AddressKind.LOCAL, "local")
    return resolve_address(address, env).require(
        AddressKind.LOCAL, AddressKind.AGENT, AddressKind.DASHBOARD, AddressKind.GCS,
        command="rtenv cache").check_reachable()


def open_backend(where: Address, token: str | None = None) -> CacheBackend:
    """The store-like backend of a local or agent address (Ray nodes are ray_nodes')."""
    return AgentBackend(where.value, token) if where.kind is AddressKind.AGENT else LocalBackend()

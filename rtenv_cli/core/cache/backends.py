"""Where `rtenv cache` looks: the embedded store (default) or an rtenv agent (`--agent URL`)."""

from __future__ import annotations

from typing import Any, Protocol

from rtenv_cli.core.cache import build_cache
from rtenv_cli.core.cache.gc import GcResult, plan_gc, prune_uv_cache, run_gc
from rtenv_cli.core.cache.ls import CacheListing, list_store


class CacheBackend(Protocol):
    def listing(self, kinds: tuple[str, ...] = ()) -> CacheListing: ...

    def gc(self, *, dry_run: bool, older_than_s: float | None = None,
           keep_storage: int | None = None, kinds: tuple[str, ...] = (),
           purge: bool = False) -> GcResult: ...


class LocalBackend:
    def __init__(self, root: Any = None) -> None:
        from rtenv_cli.core.agent.store import Store

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


def open_backend(agent: str | None, token: str | None = None) -> CacheBackend:
    return AgentBackend(agent, token) if agent else LocalBackend()

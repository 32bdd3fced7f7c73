"""`rtenv cache ls` for the rtenv store: entries with size, references and times, plus totals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rtenv_cli.core.store.index import Entry


@dataclass(frozen=True)
class CacheListing:
    source: str  # "local store /path" or the agent URL
    entries: tuple[Entry, ...]
    busy: tuple[str, ...] = field(default_factory=tuple)  # keys being built right now
    uv_cache_bytes: int | None = None  # uv's package cache shared by the venvs (not an entry)

    @property
    def totals(self) -> dict[str, Any]:
        by_kind: dict[str, dict[str, int]] = {}
        for e in self.entries:
            slot = by_kind.setdefault(e.kind, {"count": 0, "size_bytes": 0})
            slot["count"] += 1
            slot["size_bytes"] += e.size_bytes
        size = sum(e.size_bytes for e in self.entries)
        reclaimable = sum(e.size_bytes for e in self.entries if e.refs == 0 and not e.pinned)
        return {"count": len(self.entries), "size_bytes": size,
                "pinned": sum(1 for e in self.entries if e.pinned),
                "referenced_bytes": size - reclaimable, "reclaimable_bytes": reclaimable,
                "by_kind": by_kind, "uv_cache_bytes": self.uv_cache_bytes}

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "entries": [{"kind": e.kind, "uri": e.uri, "key": e.key, "label": e.label,
                         "size_bytes": e.size_bytes, "refs": e.refs, "pinned": e.pinned,
                         "pinned_until": e.pinned_until,
                         "created_at": e.created_at, "last_used_at": e.last_used_at}
                        for e in self.entries],
            "totals": self.totals,
            "building": list(self.busy),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CacheListing:
        entries = tuple(Entry(key=e.get("key", e["uri"]), kind=e["kind"], uri=e["uri"],
                              label=e["label"], path="", size_bytes=e["size_bytes"],
                              created_at=e["created_at"], last_used_at=e["last_used_at"],
                              refs=e["refs"], pinned=bool(e.get("pinned")),
                              pinned_until=e.get("pinned_until"))
                        for e in data["entries"])
        return cls(source=data.get("source", ""), entries=entries,
                   busy=tuple(data.get("building") or ()),
                   uv_cache_bytes=(data.get("totals") or {}).get("uv_cache_bytes"))


def list_store(store: Any, kinds: tuple[str, ...] = ()) -> CacheListing:
    """Everything in `store` (an agent Store), dead holders' references pruned first."""
    store.index.prune_refs()
    from rtenv_cli.core.store.files import dir_size

    entries = tuple(e for e in store.index.all() if not kinds or e.kind in kinds)
    uv_cache = store.root / "uv-cache"
    return CacheListing(source=f"local store {store.root}", entries=entries,
                        busy=tuple(store.building()),
                        uv_cache_bytes=dir_size(uv_cache) if uv_cache.is_dir() else 0)

"""`rtenv cache gc|purge` for the rtenv store: plan, then remove unreferenced entries.

Only entries with no live reference are candidates; the oldest last use goes first. Removal goes
through `Store.remove`, which takes the entry's build lock without waiting and re-checks the
references inside the same transaction that deletes the row, so an entry that is referenced or
being built when its turn comes is skipped, never removed, even if a create races the gc.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rtenv_cli.core.store.index import Entry
from rtenv_cli.core.units import human_duration


@dataclass(frozen=True)
class GcPlan:
    remove: tuple[Entry, ...]
    keep_bytes: int  # what stays (referenced or within budget)
    referenced: int  # entries never considered: they have live references or a pin
    reason: str

    @property
    def freed_bytes(self) -> int:
        return sum(e.size_bytes for e in self.remove)

    def to_dict(self) -> dict[str, Any]:
        return {"remove": [_entry(e) for e in self.remove], "freed_bytes": self.freed_bytes,
                "keep_bytes": self.keep_bytes, "referenced": self.referenced,
                "reason": self.reason}


@dataclass(frozen=True)
class GcResult:
    plan: GcPlan
    removed: tuple[Entry, ...] = ()
    skipped: tuple[Entry, ...] = ()  # referenced or being built by the time their turn came
    dry_run: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def freed_bytes(self) -> int:
        return sum(e.size_bytes for e in self.removed)

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "plan": self.plan.to_dict(),
                "removed": [_entry(e) for e in self.removed],
                "skipped": [_entry(e) for e in self.skipped], "freed_bytes": self.freed_bytes,
                **self.extra}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GcResult:
        def entries(items: list[dict[str, Any]]) -> tuple[Entry, ...]:
            return tuple(Entry(key=i["key"], kind=i["kind"], uri=i["uri"], label=i["label"],
                               path="", size_bytes=i["size_bytes"], created_at=i["created_at"],
                               last_used_at=i["last_used_at"], refs=i.get("refs", 0),
                               pinned=bool(i.get("pinned")))
                         for i in items)

        p = data["plan"]
        plan = GcPlan(entries(p["remove"]), p["keep_bytes"], p["referenced"], p["reason"])
        extra = {k: v for k, v in data.items() if k == "uv_cache_pruned_bytes"}
        return cls(plan, entries(data["removed"]), entries(data["skipped"]), data["dry_run"],
                   extra)


def _entry(e: Entry) -> dict[str, Any]:
    return {"kind": e.kind, "uri": e.uri, "key": e.key, "label": e.label,
            "size_bytes": e.size_bytes, "refs": e.refs, "pinned": e.pinned,
            "created_at": e.created_at, "last_used_at": e.last_used_at}


def plan_gc(entries: list[Entry] | tuple[Entry, ...], *, older_than_s: float | None = None,
            keep_storage: int | None = None, kinds: tuple[str, ...] = (),
            purge: bool = False, now: float | None = None) -> GcPlan:
    """Which unreferenced entries go: every one (purge), those unused for `older_than_s`, then
    the least recently used until the total fits `keep_storage`."""
    now = time.time() if now is None else now
    # held: referenced, or an upload still in its pin (pushed for a create that has not come)
    referenced = [e for e in entries if e.refs > 0 or e.pinned]
    free = sorted((e for e in entries
                   if e.refs == 0 and not e.pinned and (not kinds or e.kind in kinds)),
                  key=lambda e: e.last_used_at)
    if purge:
        chosen = list(free)
        reason = "purge: every unreferenced entry"
    else:
        chosen = []
        if older_than_s is not None:
            chosen = [e for e in free if now - e.last_used_at >= older_than_s]
        total = sum(e.size_bytes for e in entries) - sum(e.size_bytes for e in chosen)
        if keep_storage is not None:
            for e in free:
                if total <= keep_storage:
                    break
                if e not in chosen:
                    chosen.append(e)
                    total -= e.size_bytes
        parts = []
        if older_than_s is not None:
            parts.append(f"unused for {human_duration(older_than_s)} or more")
        if keep_storage is not None:
            parts.append(f"least recently used until the total is at most "
                         f"{keep_storage / 2**30:.2f} GiB")
        reason = "; ".join(parts) or "nothing requested"
    keep = sum(e.size_bytes for e in entries) - sum(e.size_bytes for e in chosen)
    return GcPlan(tuple(chosen), keep, len(referenced), reason)


def run_gc(store: Any, plan: GcPlan, *, dry_run: bool = False) -> GcResult:
    if dry_run:
        return GcResult(plan, dry_run=True)
    from rtenv_cli.core.cache import build_cache

    removed: list[Entry] = []
    skipped: list[Entry] = []
    for entry in plan.remove:
        gone = (build_cache.remove(entry.key) if entry.kind == build_cache.KIND
                else store.remove(entry.key))
        (removed if gone else skipped).append(entry)
    if removed:
        store.forget_dead_envs()  # environments nobody holds, made of what just went
    return GcResult(plan, tuple(removed), tuple(skipped))


@dataclass(frozen=True)
class Budget:
    """The agent's own limits, enforced after each create."""

    max_bytes: int | None = None
    max_age_s: float | None = None

    def enforce(self, store: Any, *, with_build_cache: bool = False) -> GcResult | None:
        """`with_build_cache`: count (and collect) this machine's build cache too, as `rtenv
        cache gc` does for the embedded store (build_cache.py)."""
        if self.max_bytes is None and self.max_age_s is None:
            return None
        store.index.prune_refs()
        extra: list[Entry] = []
        if with_build_cache:  # (the caller waits for zips still being filed: run.py)
            from rtenv_cli.core.cache import build_cache

            extra = build_cache.entries()
        plan = plan_gc([*store.index.all(), *extra], older_than_s=self.max_age_s,
                       keep_storage=self.max_bytes)
        return run_gc(store, plan) if plan.remove else None


def prune_uv_cache(store: Any) -> int:
    """`uv cache prune` on the store's uv cache; returns the bytes freed.

    Safe next to running builds: uv takes its cache lock. Venvs keep their hardlinked files.
    """
    import subprocess

    from rtenv_cli.core.store.builders import uv_bin, uv_env
    from rtenv_cli.core.store.files import dir_size

    cache = store.root / "uv-cache"
    if not cache.is_dir():
        return 0
    before = dir_size(cache)
    subprocess.run([uv_bin(), "cache", "prune", "--quiet"], env=uv_env(cache),
                   capture_output=True, check=False, timeout=600)
    return max(0, before - dir_size(cache))

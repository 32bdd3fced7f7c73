"""gc planning: unreferenced only, oldest last use first, until the budget holds."""

from __future__ import annotations

from rtenv_cli.core.cache.gc import plan_gc
from rtenv_cli.core.store.index import Entry

NOW = 1_000_000.0


def _e(key: str, size: int, age_s: float, refs: int = 0, kind: str = "uv") -> Entry:
    return Entry(key=key, kind=kind, uri=f"u://{key}", label=key, path=key, size_bytes=size,
                 created_at=NOW - age_s, last_used_at=NOW - age_s, refs=refs)


ENTRIES = [_e("new", 100, 10), _e("old", 100, 5000), _e("older", 100, 9000),
           _e("held", 1000, 99999, refs=1), _e("pkg", 50, 7000, kind="package")]


def test_older_than_takes_only_unreferenced_old_entries() -> None:
    plan = plan_gc(ENTRIES, older_than_s=3600, now=NOW)
    assert [e.key for e in plan.remove] == ["older", "pkg", "old"]
    assert plan.referenced == 1


def test_keep_storage_removes_least_recently_used_first_until_it_fits() -> None:
    plan = plan_gc(ENTRIES, keep_storage=1200, now=NOW)
    assert [e.key for e in plan.remove] == ["older", "pkg"]
    assert plan.keep_bytes == 1200
    # the referenced 1000 bytes alone exceed a 500-byte budget: they stay anyway
    assert "held" not in [e.key for e in plan_gc(ENTRIES, keep_storage=500, now=NOW).remove]


def test_kinds_and_purge() -> None:
    assert [e.key for e in plan_gc(ENTRIES, purge=True, kinds=("package",)).remove] == ["pkg"]
    assert {e.key for e in plan_gc(ENTRIES, purge=True).remove} == {"new", "old", "older", "pkg"}
    assert plan_gc(ENTRIES).remove == ()


def test_pinned_uploads_are_never_planned() -> None:
    from dataclasses import replace

    pinned = replace(_e("fresh-upload", 10**9, 99999, kind="package"), pinned=True)
    entries = [*ENTRIES, pinned]
    for plan in (plan_gc(entries, purge=True, now=NOW),
                 plan_gc(entries, older_than_s=1, keep_storage=0, now=NOW)):
        assert "fresh-upload" not in {e.key for e in plan.remove}
        assert plan.referenced == 2

"""The rtenv store of one Ray node, seen from a task pinned to it (`ray_scan.py` imports this
module on the node when rtenv is installed there): the store rtenv's runtime_env plugin builds
in, `$RTENV_HOME/store` of the raylet's environment (what the node's agent, and so the plugin,
was started with: `rtenv ray-env`).

Listing and gc are the store's own (`ls.list_store`, `gc.plan_gc` / `gc.run_gc`): an entry the
plugin holds (a URI Ray has not released with `delete_uri`: a live worker or job uses it) has a
reference from the agent's process and is never removed; `Store.remove` re-checks that under the
entry's lock. The plugin's reference is a lease renewed while a process uses the entry, so a
gc also keeps the entries a live process of the node uses (a worker Ray started from a context
it cached, between two renewals); that is decided when the gc runs, never stored, so an entry is
collectable as soon as its last process exits.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rtenv_cli.core.store.index import Entry
    from rtenv_cli.core.store.store import Store

HOME_ENV = "RTENV_HOME"


def node_store_root(env: dict[str, str]) -> Path:
    home = env.get(HOME_ENV)
    if home:
        return Path(home).expanduser() / "store"
    from rtenv_cli.core.paths import store_root

    return store_root()


def node_report(gc: dict[str, Any] | None, *, clean: bool, env: dict[str, str]
                ) -> dict[str, Any]:
    """This node's store (RTENV_HOME of `env`, the raylet's environment as ray_scan reads it):
    its entries (and with `gc`, the plan, or what went when `clean`)."""
    root = node_store_root(env)
    out: dict[str, Any] = {"root": str(root)}
    if not (root / "index.sqlite").exists():  # nothing built here: do not make a store
        return {**out, "entries": [], "totals": None, "missing": True}
    from rtenv_cli.core.cache.ls import list_store
    from rtenv_cli.core.store.store import Store

    store = Store(root)
    try:
        kinds = tuple((gc or {}).get("kinds") or ())
        out.update(list_store(store, kinds).to_dict())
        out["source"] = f"rtenv store {root}"
        if gc is not None:
            from rtenv_cli.core.cache.gc import plan_gc, run_gc

            plan = plan_gc(kept_in_use(store), older_than_s=gc.get("older_than_s"),
                           keep_storage=gc.get("keep_storage"), kinds=kinds,
                           purge=bool(gc.get("purge")))
            out["gc"] = run_gc(store, plan, dry_run=not clean).to_dict()
    finally:
        store.close()
    return out


def kept_in_use(store: Store) -> list[Entry]:
    """The entries of `store`, those a live process uses (store/users.py) marked pinned, so a
    gc plan keeps them."""
    import dataclasses

    from rtenv_cli.core.store.users import in_use

    entries = store.index.all()
    used = in_use(str(store.root / e.path) for e in entries)
    return [dataclasses.replace(e, pinned=True) if str(store.root / e.path) in used else e
            for e in entries]

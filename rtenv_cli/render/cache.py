"""Text rendering for `rtenv cache` and `rtenv agent`."""

from __future__ import annotations

import time
from typing import Any

from rtenv_cli.render.output import Output
from rtenv_cli.render.units import human_bytes, human_duration


def ago(ts: float | None, now: float | None = None) -> str:
    if not ts:
        return "-"
    return f"{human_duration(max(0.0, (now or time.time()) - ts), exact=False)} ago"


def _table(out: Output, headers: list[str], rows: list[list[str]]) -> None:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for h in headers:
        table.add_column(h, overflow="fold", justify="right" if h in ("size", "refs") else "left")
    for row in rows:
        table.add_row(*row)
    out.console().print(table)


def _short(out: Output, text: str, width: int = 26) -> str:
    """TEXT cut to WIDTH for a terminal; whole for a pipe (scripts read the full value)."""
    if not out.is_terminal or len(text) <= width:
        return text
    return text[: width - 1] + "…"


def render_listing(out: Output, listing: Any) -> None:
    data = listing.to_dict()
    entries = data["entries"]
    blobs = [e for e in entries if e["kind"] == "blob"]
    shown = [e for e in entries if e["kind"] != "blob"]
    out.line(f"{data['source']}")
    if not entries:
        out.line("(empty)")
        return
    rows = [[e["kind"], _short(out, e["label"]), _short(out, e["uri"]),
             human_bytes(e["size_bytes"]),
             _refs(e), ago(e["created_at"]), ago(e["last_used_at"])] for e in shown]
    if blobs:
        rows.append(["blob", f"{len(blobs)} delta blobs", "sha256:…",
                     human_bytes(sum(b["size_bytes"] for b in blobs)),
                     str(sum(b["refs"] for b in blobs)), "-",
                     ago(max(b["last_used_at"] for b in blobs))])
    _table(out, ["kind", "label", "uri/key", "size", "refs", "created", "last used"], rows)
    if data.get("building"):
        out.line(f"\nbuilding now: {', '.join(data['building'])}")
    t = data["totals"]
    out.line(f"\n{t['count']} entries, {human_bytes(t['size_bytes'])}; "
             f"reclaimable (unreferenced): {human_bytes(t['reclaimable_bytes'])}")
    if t.get("pinned"):
        out.line(f"pinned: {t['pinned']} fresh uploads, kept by gc until the job that uses "
                 "them starts or the pin ends")
    if t.get("uv_cache_bytes"):
        out.line(f"uv cache (shared by the venvs, pruned by `rtenv cache purge`): "
                 f"{human_bytes(t['uv_cache_bytes'])}")


def until(ts: float | None, now: float | None = None) -> str:
    """How long until `ts`: `9m`, `2h` (units.human_duration, rounded down)."""
    if not ts:
        return "-"
    return human_duration(max(0.0, ts - (now or time.time())), exact=False)


def _refs(entry: dict[str, Any]) -> str:
    """The refs column: the live holders, and a pin with the time it has left."""
    refs = str(entry["refs"])
    if entry.get("pinned"):
        return f"{refs} +pin {until(entry.get('pinned_until'))}"
    return refs


def render_plan(out: Output, result: Any) -> None:
    plan = result.plan
    if not plan.remove:
        out.line(f"Nothing to remove ({plan.reason}); {plan.referenced} referenced or pinned "
                 "entries kept")
        return
    rows = [[e.kind, _short(out, e.label), _short(out, e.uri), human_bytes(e.size_bytes),
             ago(e.last_used_at)]
            for e in plan.remove]
    verb = "Would remove" if result.dry_run else "Removing"
    out.line(f"{verb} {len(plan.remove)} entries, {human_bytes(plan.freed_bytes)} "
             f"({plan.reason}):")
    _table(out, ["kind", "label", "uri/key", "size", "last used"], rows)


def render_gc(out: Output, result: Any) -> None:
    if result.dry_run:
        render_plan(out, result)
        return
    if not result.plan.remove:
        render_plan(out, result)
        return
    out.line(f"Removed {len(result.removed)} entries, {human_bytes(result.freed_bytes)} freed")
    if result.extra.get("uv_cache_pruned_bytes"):
        out.line(f"Pruned uv's cache: {human_bytes(result.extra['uv_cache_pruned_bytes'])} freed")
    for e in result.skipped:
        out.line(f"kept {e.kind} {_short(out, e.label)}: referenced or being built when its "
                 "turn came")


def render_agent_info(out: Output, info: dict[str, Any]) -> None:
    out.line(f"rtenv agent {info.get('version')} at {info.get('root')}")


def render_ray_nodes(out: Output, listing: Any) -> None:
    data = listing.to_dict()
    ray, rtenv = data.get("only") in (None, "ray"), data.get("only") in (None, "rtenv")
    out.line(f"Ray cluster {data['address']}"
             + (f" (state API reports {data['reported']} runtime envs)"
                if data["reported"] is not None and ray else ""))
    for node in data["nodes"] if ray else ():
        _ray_node(out, node)
    for node, store in listing.rtenv_stores() if rtenv else ():
        out.line(f"\nnode {node['node_id'][:12]} ({node['node_ip']}): rtenv's plugin")
        render_listing(out, store)
    refs = data.get("tree_refs")
    if not rtenv:
        pass
    elif refs is None:
        out.line("\ntrees: references in the cluster's KV are listed through the GCS address "
                 "(--address <head>:6379)")
    else:
        out.line(f"\ntrees: {len(refs)} references held by the nodes' plugins")
        for r in refs:
            state = "" if r["alive"] else " (dead node: the next gc drops it)"
            out.line(f"  {r['manifest'][:16]}  node {r['node_id'][:12]}{state}")
    if ray:
        t = data["totals"]
        out.line(f"\nlive sessions: {human_bytes(t['live_bytes'])}; old sessions: "
                 f"{human_bytes(t['old_sessions_bytes'])} (reclaimable with `rtenv cache gc "
                 f"--address ...`)")


def _ray_node(out: Output, node: dict[str, Any]) -> None:
    """A node's Ray caches: each session's folders, with the agent's references."""
    out.line(f"\nnode {node['node_id'][:12]} ({node['node_ip']}), {node['temp_dir']}")
    agent = node.get("agent") or {}
    if "error" in agent:
        out.line(f"  runtime-env agent not reachable: {agent['error']}")
    if node.get("error"):
        out.line(f"  failed: {node['error']}")
    for s in node["sessions"]:
        status = "live session" if s["live"] else "old session, never cleaned by Ray"
        others = [i[:12] for i in s.get("nodes") or [] if i != node["node_id"]]
        shared = f"; shared with node {', '.join(others)}" if others else ""
        counted = "" if s.get("counted", True) else " (counted once, above)"
        out.line(f"  {s['name']}  ({status}{shared})  {human_bytes(s['size_bytes'])}"
                 f"{counted}")
        for t in s.get("deleting") or []:
            out.line(f"    being deleted (an interrupted gc; the next gc finishes it): "
                     f"{t['path']}  {human_bytes(t['size_bytes'])}")
        rows = [[e["kind"], _short(out, e["name"], 30), human_bytes(e["size_bytes"]),
                 "-" if e["refs"] is None else str(e["refs"]), e["state"]]
                for e in s["entries"]]
        if rows:
            _table(out, ["    kind", "entry", "size", "refs", "state"],
                   [["    " + r[0], *r[1:]] for r in rows])


def render_ray_clean(out: Output, plan: Any) -> None:
    data = plan.to_dict()
    if not data["removable"]:
        out.line("No old Ray session caches to remove")
    else:
        verb = "Would remove" if data["dry_run"] else "Removed"
        out.line(f"{verb} {len(data['removable'])} old session caches, "
                 f"{human_bytes(data['freed_bytes'])}:")
        rows = [[r["node_id"][:12], r["session"], human_bytes(r["size_bytes"]), r["path"]]
                for r in data["removable"]]
        _table(out, ["node", "session", "size", "path"], rows)
    for node, result in plan.rtenv_gc():
        out.line(f"\nnode {node['node_id'][:12]} ({node['node_ip']}): rtenv store "
                 f"{node['rtenv']['root']}")
        render_gc(out, result)
    out.line(f"\nKept: {data['note']}.")
    out.line("Current settings:")
    for key, value in data["settings"].items():
        out.line(f"  {key}={value}")


def render_run_ready(out: Output, handle: Any, seconds: float) -> None:
    """`rtenv run -v`: one line on stderr about the environment."""
    state = f"built {', '.join(handle.built)}" if handle.built else "cache hit"
    out.message(f"rtenv: environment {handle.key[:12]} ready in {seconds:.2f} s ({state})")
    for label, value in (("working_dir", handle.working_dir), ("venv", handle.venv)):
        if value:
            out.message(f"rtenv:   {label}: {value}")

"""Text, dotenv and shell rendering for `rtenv explain` (rich imported inside functions)."""

from __future__ import annotations

import shlex
from typing import Any

from rtenv_cli.core.explain import reuse
from rtenv_cli.render.output import Output


def render_dotenv(out: Output, preview: Any, *, export: bool) -> None:
    """Lines a shell sources: a value only the node knows (it holds a placeholder such as
    <session_dir>) is shown commented out, never set."""
    node_only = preview.node_only()
    for key, value in sorted(preview.env.items()):
        if value is None:
            out.line(f"unset {key}" if export else f"# {key} is unset")
            continue
        line = f"{'export ' if export else ''}{key}={shlex.quote(value)}"
        out.line(f"# {line}  # known only on the node" if key in node_only else line)


def render_text(out: Output, result: Any) -> None:
    from rich.table import Table

    p = result.preview
    con = out.console()
    for err in p.errors:
        con.print(f"[bold red]error:[/] {err}", markup=True, highlight=False)
    table = Table(title=f"Worker environment ({p.kind})", show_lines=False)
    table.add_column("variable", style="bold")
    table.add_column("value")
    table.add_column("source")
    table.add_column("notes")
    interesting = {str(d.get("env_var")) for d in p.devices}
    for key, value in sorted(p.env.items()):
        if value is None and key not in interesting:
            continue
        table.add_row(key, "<unset>" if value is None else value, p.sources.get(key, ""),
                      "; ".join(p.notes.get(key, [])))
    con.print(table)
    for key, items in sorted(p.notes.items()):
        if key.startswith("("):
            for item in items:
                con.print(f"note: {item}", highlight=False)
    con.print(f"cwd: {p.cwd}", highlight=False)
    if getattr(p, "python", None):
        con.print(f"python: {p.python} (source: {p.python_source})", highlight=False)
    con.print("PYTHONPATH order: " + (" -> ".join(p.pythonpath) or "<unset>"), highlight=False)
    _render_devices(con, p.devices)
    _render_gpu_map(con, result.gpu_map)
    con.print(f"reuse key: {reuse.key_text(result.reuse_key)}", highlight=False)
    if result.compare:
        c = result.compare
        con.print(f"--compare: could one worker serve both allocations? Ray 2.60: "
                  f"{_yes(c['ray_2_60_reusable'])}; {reuse.PROPOSAL}: "
                  f"{_yes(c['pr_63327_reusable'])}", highlight=False)
        for r in c["reasons"]:
            con.print(f"  - {r}", highlight=False)
    for w in p.warnings:
        out.warning(w)


def _yes(value: object) -> str:
    return "yes" if value else "no"


def _render_devices(con: Any, devices: list[dict[str, Any]]) -> None:
    from rich.table import Table

    if not devices:
        return
    dev = Table(title="Accelerators")
    for col in ("resource", "slots", "ids", "action"):
        dev.add_column(col)
    for d in devices:
        slots = ",".join(map(str, d.get("slots", []))) + (" (assumed)" if d.get("assumed")
                                                          else "")
        ids = ",".join(map(str, d.get("ids", [])))
        if d.get("order_guaranteed") is False:
            ids += " (any order)"
        action = str(d.get("action", ""))
        if d.get("shared"):
            action += f" ({d['shared']})"
        dev.add_row(str(d["resource"]), slots, ids, action)
    con.print(dev)


def _render_gpu_map(con: Any, gmap: dict[str, Any] | None) -> None:
    from rich.table import Table

    if gmap is None:
        return
    nv = gmap["nvml"]
    if not nv["available"]:
        con.print(f"GPU map: {nv['reason']}; known: only the ids above", highlight=False)
        return
    t = Table(title=f"GPU map (driver {nv['driver']})")
    for col in ("ray id", "CUDA", "NVML", "UUID", "PCI", "name", "memory", "MIG"):
        t.add_column(col)
    for r in gmap["rows"]:
        mem = r.get("memory_total")
        mig = r.get("mig_enabled")
        t.add_row(str(r["ray_logical_id"]), str(r.get("cuda_index", "")),
                  str(r.get("nvml_index", "?")), str(r.get("uuid", r["visible_id"])),
                  str(r.get("pci_bus_id", "")), str(r.get("name", "")),
                  f"{mem / 2**30:.0f} GiB" if mem else "",
                  "n/a" if mig is None else f"on ({len(r.get('mig', []))})" if mig else "off")
    con.print(t)


def render_verify(out: Output, report: Any) -> None:
    if report.ok:
        out.line(f"verified: the worker's environment matches the prediction "
                 f"({report.compared} variables compared)")
        return
    out.line("DIFFERENCES (variable: predicted -> actual):")
    for k, (want, got) in sorted(report.diff.items()):
        out.line(f"  {k}: {reuse.value_text(want)} -> {reuse.value_text(got)}")

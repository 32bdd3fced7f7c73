"""Text rendering of `rtenv push` / `ls-files` / `check-ignore` results (stderr summaries)."""

from __future__ import annotations

from typing import Any

from rtenv_cli.render.units import human_bytes


def _state(p: Any, dry_run: bool) -> str:
    if dry_run:
        return "dry run, nothing sent"
    if p.tree is not None:
        t = p.tree
        return (f"tree path: sent {t['files_sent']} files, {human_bytes(t['bytes_sent'])}"
                + (" (manifest delta)" if t["delta"] else "") + f" to {p.target}")
    if p.uploaded:
        return f"uploaded {human_bytes(p.zip_bytes)} to {p.target}"
    return f"already on {p.target}, nothing sent"


def summary(out: Any, result: Any) -> None:
    """Per package: URI, counts, what happened; ignored .py dirs; the pin; notes."""
    for p in result.packages:
        state = _state(p, result.dry_run)
        if p.staged:
            state += " (staged: over the cluster's upload limit)"
        out.message(f"{p.field}: {p.source}")
        out.message(f"  {p.uri}  {p.file_count} files, {human_bytes(p.total_bytes)}; {state}")
        if result.dry_run and p.size_tree:
            out.message("  largest:")
            for path, size, files in p.size_tree:
                count = f" ({files} files)" if path.endswith("/") else ""
                out.message(f"    {human_bytes(size):>10}  {path}{count}")
        for d, rule in p.ignored_py_dirs:
            out.warning(f"{p.field}: ignored directory {d}/ holds .py files (rule {rule})",
                        hint=f"if the job needs it, see `rtenv check-ignore -v {d}`")
        for w in p.warnings:
            out.warning(f"{p.field}: {w}")
    for note in result.notes:
        out.message(f"note: {note}")
    if result.packages and not result.dry_run and result.path:
        out.message("path: tree (rtenv's plugin materializes the `rtenv` field on each node)"
                    if result.path == "tree" else "path: zip (Ray's gcs:// packages)")
    if result.pin_seconds:
        out.message(f"Ray keeps an unreferenced package for {result.pin_seconds // 60} minutes "
                    "after the last check: submit the job within that time (or push again)")

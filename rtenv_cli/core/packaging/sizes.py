"""Where a package's bytes are: the largest directories and files (for --dry-run and 413s)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # validate imports this module on every file; the walk only for local dirs
    from rtenv_cli.core.packaging.walk import PackageScan


def size_tree(scan: PackageScan, n: int = 8, depth: int = 2) -> list[tuple[str, int, int]]:
    """(path, bytes, files) of the largest directories (up to `depth` levels) and files."""
    dirs: dict[str, list[int]] = {}
    files = scan.files()
    for e in files:
        parts = e.relpath.split("/")[:-1]
        for i in range(1, min(len(parts), depth) + 1):
            acc = dirs.setdefault("/".join(parts[:i]) + "/", [0, 0])
            acc[0] += e.size
            acc[1] += 1
    rows = [(k, v[0], v[1]) for k, v in dirs.items()]
    rows += [(e.relpath, e.size, 1) for e in files]
    rows.sort(key=lambda r: (-r[1], r[0]))
    return rows[:n]


def offenders(scan: PackageScan, n: int = 5) -> list[tuple[str, int]]:
    """The largest top-level entries (directories summed), for a too-large error."""
    return offenders_of(((e.relpath, e.size) for e in scan.files()), n)


def offenders_of(files: Iterable[tuple[str, int]], n: int = 5) -> list[tuple[str, int]]:
    """`offenders` of (relpath, size) pairs: the validator's walk yields those, not a scan."""
    groups: dict[str, int] = {}
    for relpath, size in files:
        head, sep, _ = relpath.partition("/")
        groups[head + sep] = groups.get(head + sep, 0) + size
    return sorted(groups.items(), key=lambda kv: -kv[1])[:n]

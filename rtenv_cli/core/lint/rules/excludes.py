"""RTE120 excludes that leave nothing, RTE121 ignore files dropping .py, RTE122 no-op excludes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.lint.engine import Context
from rtenv_cli.core.lint.rules.size import _scans

SHOWN = 5  # offenders named in one message


def check_excludes(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    excludes = ctx.data.get("excludes")
    scans = _scans(ctx)
    if isinstance(excludes, list) and excludes and not scans and not ctx.pipeline.errors:
        yield ctx.diag("RTE122", "excludes has no effect: there is no local working_dir or "
                       "py_modules to package", ("excludes",),
                       hint="remove it, or point working_dir at a local directory")
    if isinstance(excludes, str) and ctx.options.api == "ray-init" and scans:
        chars = ", ".join(repr(c) for c in dict.fromkeys(excludes))
        yield ctx.diag("RTE120", f"ray.init reads the string `{excludes}` as the patterns "
                       f"{chars}: one per character" + (", and `*` excludes everything"
                                                         if "*" in excludes else ""),
                       ("excludes",), prefer="value", hint=f"write a list: [\"{excludes}\"]")
    if isinstance(excludes, list) and scans:
        yield from _unmatched(ctx, excludes, scans)
    for path, source, _kind, result in scans:
        if not source.is_dir():
            continue
        if result.root_excluded or not result.files:
            yield ctx.diag("RTE120", f"nothing under {source} is packaged: Ray uploads an empty "
                           "package", path, prefer="value",
                           hint="narrow `excludes` (and .gitignore/.rayignore) so that your code "
                           "stays in")
        if result.ignored_py:
            extra = len(result.ignored_py) - SHOWN
            shown = ", ".join(f"`{r}`" for r in result.ignored_py[:SHOWN])
            more = f" and {extra} more" if extra > 0 else ""
            yield ctx.diag("RTE121", f".gitignore/.rayignore leave Python code out of the package: "
                           f"{shown}{more}", path, prefer="value",
                           hint=f"check with `rtenv check-ignore {source / result.ignored_py[0]}`; "
                           "un-ignore it in a .rayignore (`!` rules) if the job imports it")


def _unmatched(ctx: Context, excludes: list[object],
               scans: list[tuple[tuple[object, ...], Path, str, object]]) -> Iterator[Diagnostic]:
    """Patterns that match no path of any local package (they change nothing)."""
    from rtenv_cli.core.lint import packscan

    trees = []
    for _path, source, kind, _scan in scans:
        if not source.is_dir():
            continue
        walked = packscan.cached_walk(source, kind, (), ctx.env)
        if walked.truncated:
            return
        trees.append([*walked.files_only(), *(f"{d}/" for d in walked.dirs if d != ".")])
    if not trees:
        return
    for i, pattern in enumerate(excludes):
        if not isinstance(pattern, str) or not pattern.strip() or pattern.startswith("#"):
            continue
        matcher = packscan.pattern_matcher(pattern)
        if matcher is not None and any(matcher.decide(rel.rstrip("/")) is not None
                                       for paths in trees for rel in paths):
            continue
        if Path(pattern).is_absolute() and Path(pattern).exists():
            why = "excludes are relative to each package root, not absolute paths"
        else:
            why = "no packaged path matches it (ignore files may already drop it)"
        yield ctx.diag("RTE122", f"`{pattern}` excludes nothing: {why}", ("excludes", i),
                       prefer="value", hint="write it relative to the package root (a leading "
                       "`/` anchors it there)")


CHECKS = (check_excludes,)

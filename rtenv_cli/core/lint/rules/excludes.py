"""RTE120 excludes that leave nothing, RTE121 ignore files dropping .py, RTE122 no-op excludes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.lint.rules.size import scans as package_scans

SHOWN = 5  # offenders named in one message


def check_excludes(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    excludes = ctx.data.get("excludes")
    scans = package_scans(ctx)
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
                           hint=_unignore_hint(source, _kind, result.ignored_py[0], ctx.env))


def _unignore_hint(source: Path, kind: str, rel: str, env: Mapping[str, str]) -> str:
    """The exact line that keeps `rel` (the path Ray's walk stopped at) in the package."""
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.packaging.ignore import check_ignore

    fallback = (f"check with `rtenv check-ignore -v {source / rel}`; add a `!` rule for it in "
                "the ignore file that drops it if the job imports it")
    try:
        decision = check_ignore(source, [rel], kind, (), env)[0]  # type: ignore[arg-type]
    except RtenvError:
        return fallback
    label = decision.source or ""
    file_part, _, rest = label.partition(":")
    line = rest.split(":", 1)[0]
    if not file_part.endswith((".gitignore", ".rayignore")) or not line.isdigit():
        return fallback
    ignore_dir = file_part.rpartition("/")[0]
    inside = rel[len(ignore_dir) + 1:] if ignore_dir else rel
    # Ray's pathspec 0.8.1 gives a negation no "and everything below": a directory needs both
    lines = (f"`!/{inside}` and `!/{inside}/**`" if (source / rel).is_dir()
             else f"`!/{inside}`")
    also = (" (or set RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1 to ignore every .gitignore)"
            if file_part.endswith(".gitignore") else "")
    return (f"{source / file_part} line {line} drops it; if the job imports it, add {lines} "
            f"after that line: a `!` rule in another file cannot undo it, Ray drops a path "
            f"that any ignore file matches{also}")


def _unmatched(ctx: Context, excludes: list[object],
               scans: Sequence[tuple[tuple[object, ...], Path, str, object]]
               ) -> Iterator[Diagnostic]:
    """Patterns that match no path of any local package (they change nothing)."""
    from rtenv_cli.core.lint import packscan

    trees = []
    for _path, source, kind, _scan in scans:
        if not source.is_dir():
            continue
        walked = packscan.cached_walk(source, kind, (), ctx.env, ctx.cache.walks)
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

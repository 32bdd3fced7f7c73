"""RTE124: an excludes pattern written for other files (`**/*log*`, `*tmp*`) that also drops
Python sources (`pkg/utils/logger/`): the modules it drops are named, since importing them
fails on the workers.

Deliberate exclusions stay silent: a pattern that names Python (`*.py`, `*_test.py`), one whose
last part has no wildcard (`tests/`, `/scripts`), and one naming a folder of code people leave
out on purpose (tests, docs, examples, ...)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.lint.rules.size import scans as package_scans

SHOWN = 5
_WILDCARD = re.compile(r"[*?\[]")
DELIBERATE = frozenset({"test", "tests", "testing", "doc", "docs", "example", "examples",
                        "script", "scripts", "notebook", "notebooks", "benchmark", "benchmarks",
                        "bench", "build", "dist", "venv", "env", "site-packages", "migrations",
                        "experimental", "deprecated", "old", "legacy", "sandbox", "scratch"})


def _accidental(pattern: str) -> bool:
    """Is `pattern` a wildcard meant for other files than Python code?"""
    text = pattern.strip()
    if not text or text.startswith(("#", "!")):
        return False
    parts = [p for p in text.strip("/").split("/") if p]
    if not parts or not _WILDCARD.search(parts[-1]) or ".py" in parts[-1].lower():
        return False
    words = {w.lower() for p in parts for w in re.split(r"[^A-Za-z0-9-]+", p) if w}
    return not words & DELIBERATE


def _dropped(matcher: Any, rel: str) -> str | None:
    """The shallowest path (a directory of `rel`, or `rel`) the pattern drops: Ray's walk
    decides a directory before it enters it."""
    parts = rel.split("/")
    for depth in range(1, len(parts) + 1):
        head = "/".join(parts[:depth])
        if matcher.decide(head) is not None:
            return head + ("/" if depth < len(parts) else "")
    return None


def module_name(path: str) -> str:
    """`pkg/utils/logger/` -> pkg.utils.logger, `a/b.py` -> a.b, `pkg/__init__.py` -> pkg."""
    name = path.rstrip("/")
    name = name[: -len(".py")] if name.endswith(".py") else name
    parts = [p for p in name.split("/") if p]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _narrower(pattern: str) -> str:
    core = max(re.findall(r"[A-Za-z0-9_-]+", pattern.rsplit("/", 1)[-1]) or ["log"], key=len)
    return f"`*.{core}` (files ending in .{core}) or `/{core}s/` (one folder)"


def _keep(dropped: str) -> str:
    """The negations that bring `dropped` back (a directory needs its contents too)."""
    top = dropped.rstrip("/")
    return f"`!/{top}` and `!/{top}/**`" if dropped.endswith("/") else f"`!/{top}`"


def excludes_drop_sources(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    excludes = ctx.data.get("excludes")
    if not isinstance(excludes, list) or not any(isinstance(p, str) and _accidental(p)
                                                 for p in excludes):
        return
    from rtenv_cli.core.lint import packscan

    user = [p for p in excludes if isinstance(p, str)]
    sources = []  # per package: the Python files the excludes (negations included) leave out
    for _path, source, kind, _scan in package_scans(ctx):
        if source.is_dir():
            walked = packscan.cached_walk(source, kind, (), ctx.env, ctx.cache.walks)
            kept = packscan.cached_walk(source, kind, user, ctx.env, ctx.cache.walks)
            if not walked.truncated and not kept.truncated:
                left = set(kept.files_only())
                sources.append([rel for rel in walked.files_only()
                                if rel.endswith(".py") and rel not in left])
    for index, pattern in enumerate(excludes):
        if not isinstance(pattern, str) or not _accidental(pattern):
            continue
        matcher = packscan.pattern_matcher(pattern)
        if matcher is None:
            continue
        dropped = sorted({d for files in sources for rel in files
                          if (d := _dropped(matcher, rel)) is not None})
        if not dropped:
            continue
        shown = ", ".join(f"`{d}` ({module_name(d)})" for d in dropped[:SHOWN])
        more = f" and {len(dropped) - SHOWN} more" if len(dropped) > SHOWN else ""
        yield ctx.diag("RTE124", f"`{pattern}` also drops Python code: {shown}{more}; "
                       "importing these modules fails on the workers", ("excludes", index),
                       prefer="value", hint=f"narrow it to the files you meant, e.g. "
                       f"{_narrower(pattern)}, or keep the code with {_keep(dropped[0])} "
                       "after it")


CHECKS = (excludes_drop_sources,)

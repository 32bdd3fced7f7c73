"""RTE124: an excludes pattern written for other files (`**/*log*`, `*tmp*`) that also drops
Python sources (`pkg/utils/logger/`): the modules it drops are named, since importing them
fails on the workers. Any pattern that drops a data file the packaged code opens by name (a
string literal passed to a call: `open("sft_config.yaml")`, `Path("data/x.csv")`; packscan's
`opened_names`) is reported too.

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
    if not isinstance(excludes, list) or not any(isinstance(p, str) for p in excludes):
        return
    from rtenv_cli.core.packaging import packscan

    user = [p for p in excludes if isinstance(p, str)]
    sources = []  # per package: the Python files the excludes (negations included) leave out
    opened: list[tuple[str, str, int]] = []  # dropped files the kept code opens by name
    for _path, source, kind, _scan in package_scans(ctx):
        if source.is_dir():
            walked = packscan.cached_walk(source, kind, (), ctx.env, ctx.cache.walks)
            kept = packscan.cached_walk(source, kind, user, ctx.env, ctx.cache.walks)
            if not walked.truncated and not kept.truncated:
                left = set(kept.files_only())
                gone = [rel for rel in walked.files_only() if rel not in left]
                sources.append([rel for rel in gone if rel.endswith(".py")])
                opened += _opened(source, gone, [rel for rel in left if rel.endswith(".py")])
    yield from _opened_findings(ctx, excludes, opened)
    if not any(isinstance(p, str) and _accidental(p) for p in excludes):
        return
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


def _opened(root: Any, gone: list[str], code: list[str]) -> list[tuple[str, str, int]]:
    """(dropped file, the kept module that opens it by name, line): data files the excludes
    leave out while the code passes their name to open()/Path()/read_csv()..."""
    from rtenv_cli.core.packaging import packscan

    data = [rel for rel in gone if not rel.endswith(".py")]
    if not data or not code:
        return []
    names: dict[str, str] = {}
    for rel in data:
        names.setdefault(rel, rel)
        names.setdefault(rel.rpartition("/")[2], rel)
    found = packscan.opened_names(root, code, set(names))
    out: dict[str, tuple[str, str, int]] = {}
    for name, (module, line) in found.items():
        out.setdefault(names[name], (names[name], module, line))
    return list(out.values())


def _opened_findings(ctx: Context, excludes: list[Any], opened: list[tuple[str, str, int]]
                     ) -> Iterator[Diagnostic]:
    from rtenv_cli.core.packaging import packscan

    for index, pattern in enumerate(excludes):
        matcher = packscan.pattern_matcher(pattern) if isinstance(pattern, str) and \
            pattern.strip() and not pattern.strip().startswith(("#", "!")) else None
        if matcher is None:
            continue
        hits = [(rel, module, line) for rel, module, line in opened
                if _dropped(matcher, rel) is not None]
        if not hits:
            continue
        rel, module, line = hits[0]
        more = f" (and {len(hits) - 1} more file(s) the code opens)" if len(hits) > 1 else ""
        yield ctx.diag("RTE124", f"`{pattern}` drops `{rel}`, which `{module}` opens by name "
                       f"(line {line}){more}: it fails with FileNotFoundError on the workers",
                       ("excludes", index), prefer="value",
                       hint=f"keep it with `!/{rel}` after the pattern, or narrow the pattern")


CHECKS = (excludes_drop_sources,)

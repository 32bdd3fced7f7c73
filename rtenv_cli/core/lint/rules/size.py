"""RTE150/RTE151: size pre-flight of local working_dir/py_modules, with the largest offenders."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.lint.engine import Context
from rtenv_cli.core.spec import model

MiB = 1024 * 1024
FILE_SIZE_WARNING = 10 * MiB  # Ray's per-file warning while zipping
WALK_LIMIT = 200_000  # entries; a pre-flight must stay fast


@dataclass(frozen=True)
class Scan:
    files: tuple[tuple[str, int], ...]  # (relpath, size) of what Ray would package
    total_bytes: int
    root_excluded: bool
    ignored_py: tuple[str, ...]
    exact: bool  # False: the packaging module is missing; .gitignore/.rayignore not applied


def _user_excludes(data: Mapping[str, Any]) -> tuple[str, ...]:
    excludes = data.get("excludes")
    if isinstance(excludes, list) and all(isinstance(p, str) for p in excludes):
        return tuple(excludes)
    return ()


def scan(root: Path, kind: str, excludes: Sequence[str], env: Mapping[str, str]) -> Scan:
    """What Ray packages under `root` (the PUSH engineer's scanner when present)."""
    try:
        from rtenv_cli.core.packaging.walk import scan_package
    except ImportError:
        return _fallback_scan(root, kind, excludes, env)
    result = scan_package(root, kind=kind, excludes=tuple(excludes), env=dict(env))
    files = tuple((e.relpath, e.size) for e in result.entries if not e.is_dir)
    return Scan(files, result.total_bytes, bool(result.root_excluded),
                tuple(result.ignored_py_dirs), True)


def _spec(lines: Sequence[str]) -> Any:
    import warnings

    import pathspec

    with warnings.catch_warnings():  # Ray uses "gitwildmatch"; pathspec 1.x deprecates the name
        warnings.simplefilter("ignore", DeprecationWarning)
        return pathspec.PathSpec.from_lines("gitwildmatch", lines)


def _holds_python(path: Path) -> bool:
    if path.is_file():
        return path.suffix == ".py"
    try:
        return any(p.suffix == ".py" for _, p in zip(range(5000), path.rglob("*"), strict=False))
    except OSError:
        return False


def _fallback_scan(root: Path, kind: str, excludes: Sequence[str],
                   env: Mapping[str, str] | None = None) -> Scan:
    """Ray's `_dir_travel` rules, approximated: root-relative excludes (+ the default excludes
    for working_dir), then .gitignore/.rayignore of each directory for its subtree."""
    env = env or {}
    if root.is_file():
        size = root.stat().st_size
        return Scan(((root.name, size),), size, False, (), False)
    patterns = list(excludes)
    if kind == "working_dir":
        patterns += list(model.DEFAULT_EXCLUDES)
    use_gitignore = env.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    files: list[tuple[str, int]] = []
    ignored_py: list[str] = []
    # (base directory, spec, from an ignore file?)
    matchers: list[tuple[Path, Any, bool]] = [(root, _spec(patterns), False)]

    def ignored_by(path: Path) -> tuple[bool, bool]:
        for base, spec, from_file in matchers:
            if spec.match_file(os.path.relpath(path, base)):
                return True, from_file
        return False, False

    def travel(directory: Path, depth: int) -> None:
        added = 0
        for name in ((".gitignore",) if use_gitignore else ()) + (".rayignore",):
            ignore_file = directory / name
            if ignore_file.is_file():
                try:
                    lines = ignore_file.read_text(errors="replace").splitlines()
                except OSError:
                    continue
                matchers.append((directory, _spec(lines), True))
                added += 1
        try:
            children = sorted(directory.iterdir())
        except OSError:
            children = []
        for child in children:
            if len(files) > WALK_LIMIT:
                break
            rel = os.path.relpath(child, root)
            skip, from_file = ignored_by(child)
            if skip:
                if from_file and _holds_python(child):
                    ignored_py.append(rel)
                continue
            if child.is_dir() and depth < 64:  # noqa: PLR2004 - Ray only stops at ELOOP
                travel(child, depth + 1)
            elif child.is_file():
                try:
                    files.append((rel, child.stat().st_size))
                except OSError:
                    continue
        del matchers[len(matchers) - added:]

    root_excluded = ignored_by(root)[0] if patterns else False
    if not root_excluded:
        travel(root, 0)
    return Scan(tuple(files), sum(s for _, s in files), root_excluded, tuple(ignored_py), False)


def offenders(files: Sequence[tuple[str, int]], n: int = 5) -> list[tuple[str, int]]:
    """The largest top-level entries (directories summed) and the largest single files."""
    groups: dict[str, int] = {}
    for rel, size in files:
        head = rel.split(os.sep, 1)
        key = head[0] + ("/" if len(head) > 1 else "")
        groups[key] = groups.get(key, 0) + size
    return sorted(groups.items(), key=lambda kv: -kv[1])[:n]


def _fmt(size: int) -> str:
    return f"{size / MiB:.1f} MiB"


def package_scans(ctx: Context) -> Iterator[tuple[tuple[Any, ...], Path, str, Scan]]:
    if not isinstance(ctx.data, Mapping):
        return
    excludes = _user_excludes(ctx.data)
    for json_path, source, kind in ctx.pipeline.packages:
        yield json_path[len(ctx.prefix):], source, kind, scan(source, kind, excludes, ctx.env)


def check_size(ctx: Context) -> Iterator[Diagnostic]:
    limit = (model.JOB_SUBMIT_UPLOAD_LIMIT if ctx.options.api == "job-submit"
             else model.GCS_PACKAGE_LIMIT)
    where = "the 100 MiB job-submit upload limit" if ctx.options.api == "job-submit" else \
        "the 512 MiB package limit"
    for path, _source, _kind, result in _scans(ctx):
        top = ", ".join(f"{name} {_fmt(size)}" for name, size in offenders(result.files))
        big = [(r, s) for r, s in result.files if s >= FILE_SIZE_WARNING]
        if result.total_bytes >= limit:
            yield ctx.diag("RTE150", f"package holds {_fmt(result.total_bytes)} before "
                           f"compression, over {where}; largest: {top}", path, prefer="value",
                           severity=Severity.ERROR,
                           hint="add the largest entries to `excludes` (or .rayignore), or "
                           "ship data from remote storage")
        elif result.total_bytes >= limit // 2 or big:
            detail = (f"{_fmt(result.total_bytes)} to upload; largest: {top}" if
                      result.total_bytes >= limit // 2 else
                      "large files: " + ", ".join(f"{r} {_fmt(s)}" for r, s in
                                                  sorted(big, key=lambda x: -x[1])[:5]))
            yield ctx.diag("RTE151", detail, path, prefer="value",
                           hint="exclude what the job does not import or read")


def _scans(ctx: Context) -> list[tuple[tuple[Any, ...], Path, str, Scan]]:
    cache = getattr(ctx, "_scans", None)
    if cache is None:
        cache = list(package_scans(ctx))
        ctx._scans = cache  # type: ignore[attr-defined]  # shared with the excludes rules
    return cache


CHECKS = (check_size,)

"""RTE150/RTE151: size pre-flight of local working_dir/py_modules, with the largest offenders."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.spec import model

MiB = 1024 * 1024
FILE_SIZE_WARNING = 10 * MiB  # Ray's per-file warning while zipping


@dataclass(frozen=True)
class Scan:
    files: tuple[tuple[str, int], ...]  # (relpath, size) of what Ray would package
    total_bytes: int
    root_excluded: bool
    ignored_py: tuple[str, ...]
    exact: bool


def _user_excludes(data: Mapping[str, Any]) -> tuple[str, ...]:
    excludes = data.get("excludes")
    if isinstance(excludes, list) and all(isinstance(p, str) for p in excludes):
        return tuple(excludes)
    return ()


def scan(root: Path, kind: str, excludes: Sequence[str], env: Mapping[str, str],
         walks: dict[tuple[Any, ...], Any] | None = None) -> Scan:
    """What Ray packages under `root`: packaging's scan, or the forgiving walk where packaging
    refuses the tree (FIFOs, loops, unreadable files: the pipeline reports those)."""
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.packaging import packscan
    from rtenv_cli.core.packaging.walk import scan_package

    try:
        result = scan_package(root, kind=kind, excludes=tuple(excludes),  # type: ignore[arg-type]
                              env=dict(env))
    except RtenvError:
        return _forgiving_scan(root, kind, excludes, env, walks)
    files = tuple((e.relpath, e.size) for e in result.files())
    # Ray drops ignored .py files at any depth; the package scan reports top-level dirs only
    deep = (packscan.cached_walk(root, kind, excludes, env, walks).ignored_py
            if root.is_dir() else ())
    ignored = tuple(dict.fromkeys((*result.ignored_py_dirs, *deep)))
    return Scan(files, result.total_bytes, bool(result.root_excluded), ignored, True)


def _forgiving_scan(root: Path, kind: str, excludes: Sequence[str], env: Mapping[str, str],
                    walks: dict[tuple[Any, ...], Any] | None) -> Scan:
    from rtenv_cli.core.packaging import packscan

    if root.is_file():
        size = root.stat().st_size
        return Scan(((root.name, size),), size, False, (), False)
    walked = packscan.cached_walk(root, kind, excludes, env, walks)
    return Scan(walked.files, walked.total_bytes, walked.root_excluded, walked.ignored_py, True)


def _fmt(size: int) -> str:
    return f"{size / MiB:.1f} MiB"


def package_scans(ctx: Context) -> Iterator[tuple[tuple[Any, ...], Path, str, Scan]]:
    if not isinstance(ctx.data, Mapping):
        return
    excludes = _user_excludes(ctx.data)
    for json_path, source, kind in ctx.pipeline.packages:
        yield (json_path[len(ctx.prefix):], source, kind,
               scan(source, kind, excludes, ctx.env, ctx.cache.walks))


def check_size(ctx: Context) -> Iterator[Diagnostic]:
    from rtenv_cli.core.packaging.sizes import offenders_of

    limit = (model.JOB_SUBMIT_UPLOAD_LIMIT if ctx.options.api == "job-submit"
             else model.GCS_PACKAGE_LIMIT)
    where = "the 100 MiB job-submit upload limit" if ctx.options.api == "job-submit" else \
        "the 512 MiB package limit"
    refused = {e.json_path for e in ctx.pipeline.errors if e.stage == "upload"}
    for path, _source, _kind, result in scans(ctx):
        if (*ctx.prefix, *path) in refused:
            continue  # Ray's upload fails: RTE150 comes from the pipeline, as Ray's verdict
        top = ", ".join(f"{name} {_fmt(size)}" for name, size in offenders_of(result.files))
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


def scans(ctx: Context) -> list[tuple[tuple[Any, ...], Path, str, Scan]]:
    """`package_scans` of this runtime_env, computed once per file (the excludes rules too)."""
    key = (ctx.prefix, ctx.options.api)
    if key not in ctx.cache.scans:
        ctx.cache.scans[key] = list(package_scans(ctx))
    return ctx.cache.scans[key]


CHECKS = (check_size,)

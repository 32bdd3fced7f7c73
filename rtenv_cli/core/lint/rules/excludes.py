"""RTE120 excludes that leave nothing, RTE121 Python sources dropped by an ignore file or Ray's
defaults (named; what `excludes` drops is RTE124's), RTE122 excludes that can never match,
RTE123 excludes Ray's defaults already cover.

Which patterns are which is `lint/patterns.py`'s docstring; a pattern that matches nothing *yet*
(`outputs/` before the first run) is not reported."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.lint.rules.size import scans as package_scans

SHOWN = 5  # offenders named in one message
# folders whose Python files are an installed environment or a cache, never the job's code
_NOT_SOURCES = frozenset({".git", "__pycache__", ".tox", ".nox", ".eggs", "site-packages",
                          ".mypy_cache", ".pytest_cache", ".ipynb_checkpoints", "node_modules"})


def check_excludes(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    excludes = ctx.data.get("excludes")
    scans = package_scans(ctx)
    # without a working_dir the file may be for `ray job submit --working-dir DIR`, which
    # sets the working_dir these excludes apply to
    if isinstance(excludes, list) and excludes and not scans and not ctx.pipeline.errors and \
            "working_dir" in ctx.data:
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
    user = tuple(excludes) if isinstance(excludes, list) and \
        all(isinstance(p, str) for p in excludes) else ()
    for path, source, kind, result in scans:
        if not source.is_dir():
            continue
        if result.root_excluded or not result.files:
            yield ctx.diag("RTE120", f"nothing under {source} is packaged: Ray uploads an empty "
                           "package", path, prefer="value",
                           hint=f"narrow {_drop_sources(source, user)} so that your code stays in")
        if result.ignored_py:
            yield from _dropped_python(ctx, path, source, kind, ignored=result.ignored_py,
                                       user=user)


def _drop_sources(source: Path, user: Sequence[str]) -> str:
    """What can drop files from `source`, for RTE120's hint: only the sources that exist."""
    names = ["`excludes`"] if user else []
    names += [name for name in (".gitignore", ".rayignore") if (source / name).is_file()]
    return " and ".join(names) or "the ignore rules (`rtenv check-ignore -v` shows them)"


def _dropped_python(ctx: Context, path: tuple[object, ...], source: Path, kind: str, *,
                    ignored: Sequence[str], user: Sequence[str]) -> Iterator[Diagnostic]:
    """RTE121, one finding per rule source (an ignore file, Ray's defaults), each naming it:
    never ".gitignore" for what `excludes` dropped. What an `excludes` pattern drops is RTE124's
    (rules/excludes_sources.py: it names the modules, at any depth), not reported twice."""
    groups: dict[str, list[str]] = {}
    for rel, label in zip(ignored, _labels(source, kind, ignored, user, ctx.env), strict=True):
        if _is_environment(source / rel) or label.startswith("excludes["):
            continue
        origin = _origin(label)
        groups.setdefault(origin, []).append(rel)
    for origin, rels in groups.items():
        extra = len(rels) - SHOWN
        shown = ", ".join(f"`{r}`" for r in rels[:SHOWN]) + (f" and {extra} more"
                                                             if extra > 0 else "")
        if origin == "ray-default":
            from rtenv_cli.core.packaging.ignore import default_excludes

            defaults = ", ".join(default_excludes(ctx.env))
            yield ctx.diag("RTE121", f"Ray's default excludes ({defaults}) leave Python code "
                           f"out of the package: {shown}", path,
                           prefer="value", hint="rename the folder, or submit with "
                           "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES set to the defaults you "
                           "want (e.g. \".git,.venv,__pycache__\")")
        else:
            where = origin or ".gitignore/.rayignore"
            yield ctx.diag("RTE121", f"{where} leaves Python code out of the package: {shown}",
                           path, prefer="value",
                           hint=_unignore_hint(source, kind, rels[0], ctx.env))


def _labels(source: Path, kind: str, ignored: Sequence[str], user: Sequence[str],
            env: Mapping[str, str]) -> list[str]:
    """The rule that drops each path: "excludes[2]:*log*", "ray-default:venv",
    "sub/.gitignore:3:lib/" (packaging's labels); "" where it cannot be told."""
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.packaging.ignore import check_ignore

    try:
        decisions = check_ignore(source, list(ignored), kind, user, env)  # type: ignore[arg-type]
    except RtenvError:
        return ["" for _ in ignored]
    return [d.source or "" for d in decisions]


def _origin(label: str) -> str:
    """"excludes[2]", "ray-default", "sub/.gitignore" (the ignore file): what a label names."""
    import re

    if label.startswith(("excludes[", "ray-default:")):
        return label.split(":", 1)[0]
    found = re.match(r"(.*?):\d+:", label)
    return found.group(1) if found else ""


def _is_environment(path: Path) -> bool:
    """A virtualenv, conda env or tool cache: its .py files are not the job's sources."""
    if path.name in _NOT_SOURCES:
        return True
    return (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir()


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
    """Patterns that match no packaged path: RTE122 when they can never match, RTE123 when
    Ray's default excludes already drop what they name, nothing when it is merely not there
    yet (see lint/patterns.py)."""
    from rtenv_cli.core.lint import patterns
    from rtenv_cli.core.packaging import packscan
    from rtenv_cli.core.packaging.ignore import default_excludes

    trees: list[list[str]] = []
    roots: list[Path] = []
    has_working_dir = False
    for _path, source, kind, _scan in scans:
        if not source.is_dir():
            continue
        walked = packscan.cached_walk(source, kind, (), ctx.env, ctx.cache.walks)
        if walked.truncated:
            return
        trees.append([*walked.files_only(), *(f"{d}/" for d in walked.dirs if d != ".")])
        roots.append(walked.root)
        has_working_dir = has_working_dir or kind == "working_dir"
    if not trees:
        return
    everything = [rel for paths in trees for rel in paths]
    defaults = default_excludes(ctx.env) if has_working_dir else []
    redundant: list[tuple[int, str, str]] = []
    for i, pattern in enumerate(excludes):
        if not isinstance(pattern, str) or not pattern.strip() or \
                pattern.strip().startswith(("#", "!")):
            continue
        matcher = packscan.pattern_matcher(pattern)
        if matcher is not None and any(matcher.decide(rel.rstrip("/")) is not None
                                       for rel in everything):
            continue
        dead = patterns.never_matches(pattern, everything, roots)
        if dead is not None:
            hint = (f"write `{dead.fix}`" if dead.fix else
                    "write it relative to the package root (a leading `/` anchors it there)")
            yield ctx.diag("RTE122", f"`{pattern}` excludes nothing: {dead.why}",
                           ("excludes", i), prefer="value", hint=hint)
            continue
        covered = patterns.default_covered(matcher, defaults) if matcher is not None else None
        if covered is not None:
            redundant.append((i, pattern, covered))
    # a default repeated beside the user's own patterns is harmless (and common): only a list
    # that changes nothing at all is worth one note
    if redundant and len(redundant) == len(excludes):
        shown = ", ".join(f"`{p}`" for _i, p, _c in redundant)
        yield ctx.diag("RTE123", f"excludes changes nothing: {shown} only repeat Ray's default "
                       "excludes, never uploaded with a working_dir", ("excludes",),
                       hint="remove the list (the defaults are "
                       f"{', '.join(defaults)}; RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES "
                       "changes them)")


CHECKS = (check_excludes,)

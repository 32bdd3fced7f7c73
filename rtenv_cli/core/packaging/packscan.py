"""The validator's view of a local working_dir/py_module: Ray's `_dir_travel` walk, forgiving.

Ignore decisions and hashes are the package walk's (ignore.py: Ray's pathspec 0.8.1 semantics;
hashing.py: Ray's XOR fold), so `rtenv validate` agrees with `rtenv push` on every path. What
differs is the walk: the validator must keep going where packaging refuses (FIFOs, unreadable
files or ignore files: the pipeline reports those as findings), report ignored `.py` files at any
depth (RTE121), and stay bounded on huge trees (WALK_LIMIT).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WALK_LIMIT = 200_000  # paths; a pre-flight must stay bounded


@dataclass(frozen=True)
class Walked:
    root: Path
    files: tuple[tuple[str, int], ...]  # (relpath, size) of packaged files
    dirs: tuple[str, ...]  # packaged directories, "." included
    root_excluded: bool
    ignored_py: tuple[str, ...]  # .py files/dirs dropped by .gitignore/.rayignore
    truncated: bool

    def files_only(self) -> list[str]:
        return [rel for rel, _ in self.files]

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)


def pattern_matcher(pattern: str) -> Any:
    """One excludes pattern as packaging compiles it (None when it can match nothing)."""
    from rtenv_cli.core.packaging.ignore import compile_lines

    return compile_lines([(pattern, pattern)], ".")


def _holds_python(path: Path) -> bool:
    if not path.is_dir():
        return path.suffix == ".py"
    try:
        return any(p.suffix == ".py" for _, p in zip(range(5000), path.rglob("*"), strict=False))
    except OSError:
        return False


def walk(root: Path, kind: str, excludes: Sequence[str], env: Mapping[str, str]) -> Walked:
    from rtenv_cli.core.errors import PackagingError
    from rtenv_cli.core.packaging.ignore import excludes_matcher, ignore_file_matchers

    root = Path(root).absolute()
    top = excludes_matcher(kind, list(excludes), env)  # type: ignore[arg-type]
    matchers: list[Any] = [top] if top is not None else []
    files: list[tuple[str, int]] = []
    dirs: list[str] = []
    ignored_py: list[str] = []
    state = {"count": 0, "truncated": False, "root_excluded": False}

    def travel(path: Path, rel: str) -> None:
        state["count"] += 1
        if state["count"] > WALK_LIMIT:
            state["truncated"] = True
            return
        added: list[Any] = []
        if path.is_dir():
            try:
                added = ignore_file_matchers(path, rel, env)
            except PackagingError:
                added = []  # unreadable ignore file: Ray fails on it; the pipeline says so
            matchers.extend(added)
        hit = next((m for m in matchers if m.decide(rel) is not None), None)
        if hit is not None:
            if rel == ".":
                state["root_excluded"] = True
            elif hit is not top and _holds_python(path):
                ignored_py.append(rel)
        elif path.is_dir():
            dirs.append(rel)
            try:
                names = sorted(os.listdir(path))
            except OSError:
                names = []
            for name in names:
                travel(path / name, name if rel == "." else f"{rel}/{name}")
        else:
            try:
                files.append((rel, path.stat().st_size))
            except OSError:
                files.append((rel, 0))
        if added:
            del matchers[len(matchers) - len(added):]

    travel(root, ".")
    return Walked(root, tuple(files), tuple(dirs), bool(state["root_excluded"]),
                  tuple(sorted(ignored_py)), bool(state["truncated"]))


def _digest(path: Path, rel: str, is_dir: bool) -> bytes:
    from rtenv_cli.core.errors import PackagingError
    from rtenv_cli.core.packaging.hashing import entry_digest

    try:
        return entry_digest(rel, None if is_dir else path, is_dir)
    except PackagingError:
        return entry_digest(rel, None, True)  # Ray hashes an unreadable file by its name only


def directory_uri(walked: Walked) -> str:
    from rtenv_cli.core.packaging.hashing import acc_of, uri_for_acc

    digests = [_digest(walked.root / rel, rel, True) for rel in walked.dirs]
    digests += [_digest(walked.root / rel, rel, False) for rel, _size in walked.files]
    return uri_for_acc(acc_of(digests))


def file_uri(path: Path) -> str:
    """A single-file module (`py_modules: [x.py]` under ray.init)."""
    from rtenv_cli.core.packaging.hashing import acc_of, uri_for_acc

    path = Path(path).absolute()
    return uri_for_acc(acc_of([_digest(path, path.name, False)]))


def package_key(root: Path, kind: str, excludes: Sequence[str], env: Mapping[str, str]
                ) -> tuple[Any, ...]:
    """What decides a package's walk: its absolute root, kind, excludes and Ray's switches."""
    return (str(Path(root).absolute()), kind, tuple(excludes),
            env.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE"),
            env.get("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES"))


def cached_walk(root: Path, kind: str, excludes: Sequence[str], env: Mapping[str, str],
                cache: dict[tuple[Any, ...], Walked] | None) -> Walked:
    """`walk`, remembered in `cache` (a `RunCache.walks`: one validate run shares it)."""
    if cache is None:
        return walk(root, kind, excludes, env)
    key = package_key(root, kind, excludes, env)
    if key not in cache:
        cache[key] = walk(root, kind, excludes, env)
    return cache[key]


# a string literal handed to a call, `open("sft_config.yaml")`, `Path('data/labels.csv')`,
# `pd.read_csv("x.csv")`: what code opens by name (a cheap scan of the text, not a parse)
_OPENED = re.compile(r"""[\w.]\(\s*(?:[A-Za-z_]\w*\s*=\s*)?[rRbBuU]?(["'])([^"'\n\\]{1,300})\1""")
SCAN_BYTES = 8 * 1024 * 1024  # Python text read per package when looking for opened names


def opened_names(root: Path, sources: Sequence[str], wanted: set[str]
                 ) -> dict[str, tuple[str, int]]:
    """Which of `wanted` (relative paths or file names) the Python files `sources` (relative to
    `root`) pass to a call as a string literal: {name: (source file, line)}. Bounded to
    SCAN_BYTES of text; a file is only searched for literals when it holds a wanted name."""
    found: dict[str, tuple[str, int]] = {}
    budget = SCAN_BYTES
    for rel in sources:
        if budget <= 0 or len(found) == len(wanted):
            break
        try:
            with (root / rel).open("rb") as fh:
                raw = fh.read(min(budget, SCAN_BYTES // 8))
        except OSError:
            continue
        budget -= len(raw)
        text = raw.decode("utf-8", "replace")
        if not any(name.rpartition("/")[2] in text for name in wanted):
            continue
        for match in _OPENED.finditer(text):
            literal = match.group(2).strip().removeprefix("./")
            for name in (literal, literal.rpartition("/")[2]):
                if name in wanted and name not in found:
                    found[name] = (rel, text.count("\n", 0, match.start()) + 1)
    return found


def package_uri(source: Path, *, kind: str, excludes: Sequence[str] = (),
                env: Mapping[str, str] | None = None) -> str:
    """Ray's URI for a local directory or single .py file, from the forgiving walk."""
    env = {} if env is None else env
    if Path(source).is_file():
        return file_uri(Path(source))
    return directory_uri(walk(Path(source), kind, excludes, env))

"""A stand-in for `rtenv_cli.core.packaging` (the PUSH feature) while it is not installed: walks a
local working_dir/py_module with Ray's `_dir_travel` rules and computes Ray's package URI.

Rules (Ray 2.60.0 `_private/runtime_env/packaging.py`): at every path, first the .gitignore
(unless RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1) and .rayignore of that path are added, then the path
is skipped if any active matcher matches it (relative to the matcher's own directory; the root is
"."); otherwise it is hashed and, for a directory, its children are visited. The URI is
`gcs://_ray_pkg_<hex>.zip` of the XOR of `sha1(relpath [+ content])` over the hashed paths,
folded into 8 bytes starting from b"00000000". working_dir adds the default excludes.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_EXCLUDES = ".git,.venv,venv,__pycache__"
EMPTY_ACC = b"0" * 8
WALK_LIMIT = 200_000  # paths; a pre-flight must stay bounded
_CHUNK = 4 * 1024 * 1024


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


def spec(lines: Sequence[Any]) -> Any:
    import pathspec

    with warnings.catch_warnings():  # Ray's vendored pathspec calls it "gitwildmatch"
        warnings.simplefilter("ignore", DeprecationWarning)
        return pathspec.PathSpec.from_lines("gitwildmatch", [x for x in lines if x])


def default_excludes(env: Mapping[str, str]) -> list[str]:
    value = env.get("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES", DEFAULT_EXCLUDES)
    return [x.strip() for x in value.split(",") if x.strip()]


def _holds_python(path: Path) -> bool:
    if not path.is_dir():
        return path.suffix == ".py"
    try:
        return any(p.suffix == ".py" for _, p in zip(range(5000), path.rglob("*"), strict=False))
    except OSError:
        return False


def walk(root: Path, kind: str, excludes: Sequence[str], env: Mapping[str, str]) -> Walked:
    root = Path(root).absolute()
    patterns = list(excludes)
    if kind == "working_dir":
        patterns = default_excludes(env) + patterns
    use_gitignore = env.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    matchers: list[tuple[Path, Any, bool]] = [(root, spec(patterns), False)]
    files: list[tuple[str, int]] = []
    dirs: list[str] = []
    ignored_py: list[str] = []
    state = {"count": 0, "truncated": False, "root_excluded": False}

    def travel(path: Path) -> None:  # noqa: PLR0912 - mirrors Ray's _dir_travel step by step
        state["count"] += 1
        if state["count"] > WALK_LIMIT:
            state["truncated"] = True
            return
        added = 0
        if path.is_dir():
            for name in ((".gitignore",) if use_gitignore else ()) + (".rayignore",):
                ignore_file = path / name
                if ignore_file.is_file():
                    try:
                        with ignore_file.open() as f:
                            matchers.append((path, spec(f.readlines()), True))
                            added += 1
                    except (OSError, UnicodeDecodeError):
                        continue
        rel = os.path.relpath(path, root)
        hit = next((from_file for base, spec, from_file in matchers
                    if spec.match_file(os.path.relpath(path, base))), None)
        if hit is not None:
            if path == root:
                state["root_excluded"] = True
            elif hit and _holds_python(path):
                ignored_py.append(rel)
        elif path.is_dir():
            dirs.append(rel)
            try:
                children = list(path.iterdir())
            except OSError:
                children = []
            for child in children:
                travel(child)
        else:
            try:
                files.append((rel, path.stat().st_size))
            except OSError:
                files.append((rel, 0))
        del matchers[len(matchers) - added:]

    travel(root)
    return Walked(root, tuple(files), tuple(dirs), bool(state["root_excluded"]),
                  tuple(sorted(ignored_py)), bool(state["truncated"]))


def _xor(acc: bytes, digest: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(acc, digest, strict=False))


def _digest(path: Path, rel: str, is_dir: bool) -> bytes:
    sha1 = hashlib.sha1(rel.encode())  # noqa: S324 - Ray's package naming scheme
    if not is_dir:
        try:
            with path.open("rb") as f:
                while chunk := f.read(_CHUNK):
                    sha1.update(chunk)
        except OSError:
            pass  # Ray hashes an unreadable file by its name only
    return sha1.digest()


def directory_uri(walked: Walked) -> str:
    acc = EMPTY_ACC
    for rel in walked.dirs:
        acc = _xor(acc, _digest(walked.root / rel, rel, True))
    for rel, _size in walked.files:
        acc = _xor(acc, _digest(walked.root / rel, rel, False))
    return f"gcs://_ray_pkg_{acc.hex()}.zip"


def file_uri(path: Path) -> str:
    """A single-file module (`py_modules: [x.py]` under ray.init)."""
    path = Path(path).absolute()
    return f"gcs://_ray_pkg_{_xor(_digest(path, path.name, False), EMPTY_ACC).hex()}.zip"


_cache: dict[tuple[Any, ...], Walked] = {}


def cached_walk(root: Path, kind: str, excludes: Sequence[str],
                env: Mapping[str, str]) -> Walked:
    key = (str(Path(root).absolute()), kind, tuple(excludes),
           env.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE"),
           env.get("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES"))
    if key not in _cache:
        if len(_cache) > 64:  # noqa: PLR2004 - a small bound; one validate run sees few roots
            _cache.clear()
        _cache[key] = walk(root, kind, excludes, env)
    return _cache[key]


def package_uri(source: Path, *, kind: str, excludes: Sequence[str] = (),
                env: Mapping[str, str] | None = None) -> str:
    """Ray's URI for a local directory or single .py file (fallback for the contract API)."""
    env = {} if env is None else env
    if Path(source).is_file():
        return file_uri(Path(source))
    return directory_uri(cached_walk(Path(source), kind, excludes, env))

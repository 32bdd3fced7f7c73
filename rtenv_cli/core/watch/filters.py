"""Which paths never trigger a push: editor/temp files and the package's own ignore rules.

Ignore rules are Ray's (`_dir_travel`): walking from the root down to a path, each directory's
`.gitignore` (unless RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1) and `.rayignore` are added before the
directory itself is tested, and a path is dropped when any active matcher matches it (relative to
the matcher's own directory). Checking one changed path therefore costs its ancestor chain, not a
walk of the tree. The PUSH feature's `packaging.ignore` is the reference; its gitwildmatch
matcher is built here through `lint.packscan.spec` so that both agree on pattern semantics.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Editor and OS droppings (Tilt's ephemeral list, Modal's extras, and a few more). Matched on the
# base name only. These are *trigger* filters: they never start a push. Whether such a file is in
# the package is decided by the ignore rules at snapshot time, like Ray.
EPHEMERAL_PATTERNS: tuple[str, ...] = (
    "4913",  # vim's write-permission probe file
    "*~",  # vim/emacs backups
    ".*.swp", ".*.swx", ".*.swo", ".*.swn", ".*.swpx", "*.swp",  # vim swap files
    ".#*",  # emacs lock links
    "#*#",  # emacs auto-save
    "flymake_*", "*_flymake.*",
    "*___jb_old___", "*___jb_tmp___", "*___jb_bak___",  # JetBrains safe-write temp files
    ".DS_Store", "._*", "Thumbs.db", "desktop.ini",
    ".kate-swp", "*.kate-swp",
    "*-go-tmp-umask",
    ".goutputstream-*",  # GNOME/gedit
    "*.tmp", "*.crdownload", "*.part",
    "sed??????",  # `sed -i` temp files
)
EPHEMERAL_DIRS: frozenset[str] = frozenset({".git", ".hg", ".svn", "__pycache__", ".mypy_cache",
                                            ".pytest_cache", ".ruff_cache", ".idea"})
IGNORE_FILES = (".gitignore", ".rayignore")
DEFAULT_EXCLUDES = ".git,.venv,venv,__pycache__"


def is_ephemeral(relpath: str) -> bool:
    """True for editor/OS temp files and for anything under a VCS/cache directory."""
    parts = relpath.replace(os.sep, "/").split("/")
    if any(p in EPHEMERAL_DIRS for p in parts[:-1]):
        return True
    name = parts[-1]
    if name in EPHEMERAL_DIRS:
        return True
    return any(fnmatch.fnmatchcase(name, pat) for pat in EPHEMERAL_PATTERNS)


def _spec(lines: Sequence[str]) -> Any:
    from rtenv_cli.core.lint.packscan import spec

    return spec(list(lines))


def default_excludes(env: Mapping[str, str]) -> list[str]:
    value = env.get("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES", DEFAULT_EXCLUDES)
    return [x.strip() for x in value.split(",") if x.strip()]


class IgnoreRules:
    """Ray's ignore decision for single paths, with per-directory ignore files cached by stat."""

    def __init__(self, root: Path, *, kind: str = "working_dir", excludes: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.root = Path(root).absolute()
        env = dict(os.environ if env is None else env)
        patterns = list(excludes)
        if kind == "working_dir":
            patterns = default_excludes(env) + patterns
        self.top = _spec(patterns)
        self.use_gitignore = env.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
        self._files: dict[str, tuple[tuple[int, int] | None, Any]] = {}

    def _dir_specs(self, directory: Path) -> list[Any]:
        specs = []
        names = (IGNORE_FILES if self.use_gitignore else (".rayignore",))
        for name in names:
            path = directory / name
            try:
                st = path.stat()
            except OSError:
                continue
            key = str(path)
            stamp = (st.st_mtime_ns, st.st_size)
            cached = self._files.get(key)
            if cached is None or cached[0] != stamp:
                try:
                    lines = path.read_text().splitlines()
                except (OSError, UnicodeDecodeError):
                    continue
                cached = (stamp, _spec(lines))
                self._files[key] = cached
            specs.append(cached[1])
        return specs

    def is_ignored(self, relpath: str, *, is_dir: bool | None = None) -> bool:
        """Whether Ray's walk would skip `relpath` (or one of its ancestors)."""
        del is_dir  # Ray tests paths without a trailing slash, so directory-only rules do not apply
        parts = [p for p in relpath.replace(os.sep, "/").split("/") if p and p != "."]
        active: list[tuple[Path, Any]] = [(self.root, self.top)]
        current = self.root
        chain = [("."), *("/".join(parts[: i + 1]) for i in range(len(parts)))]
        for depth, _rel in enumerate(chain):
            if depth > 0:
                current = current / parts[depth - 1]
            if current.is_dir():
                active.extend((current, s) for s in self._dir_specs(current))
            for base, spec in active:
                if spec.match_file(os.path.relpath(current, base)):
                    return True
        return False

    def root_excluded(self) -> bool:
        return self.is_ignored(".")


def is_ignore_file(relpath: str) -> bool:
    return os.path.basename(relpath) in IGNORE_FILES


DEPENDENCY_PATTERNS = ("requirements*.txt", "pyproject.toml", "uv.lock", "environment.yml",
                       "environment.yaml", "setup.py", "setup.cfg", "constraints*.txt")


def is_dependency_file(relpath: str) -> bool:
    name = os.path.basename(relpath)
    return any(fnmatch.fnmatchcase(name, p) for p in DEPENDENCY_PATTERNS)

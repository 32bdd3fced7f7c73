"""Which paths never trigger a push: editor/temp files and the package's own ignore rules.

Ignore rules are Ray's (`_dir_travel`): walking from the root down to a path, each directory's
`.gitignore` (unless RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1) and `.rayignore` are added before the
directory itself is tested, and a path is dropped when any active matcher matches it (relative to
the matcher's own directory). Checking one changed path therefore costs its ancestor chain, not a
walk of the tree. The matchers are `packaging.ignore`'s, shared with push and check-ignore.
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


def is_ephemeral(relpath: str) -> bool:
    """True for editor/OS temp files and for anything under a VCS/cache directory."""
    parts = relpath.replace(os.sep, "/").split("/")
    if any(p in EPHEMERAL_DIRS for p in parts[:-1]):
        return True
    name = parts[-1]
    if name in EPHEMERAL_DIRS:
        return True
    return any(fnmatch.fnmatchcase(name, pat) for pat in EPHEMERAL_PATTERNS)


class IgnoreRules:
    """Ray's ignore decision for single paths, with per-directory ignore files cached by stat.

    The matchers are packaging.ignore's (Ray's pathspec 0.8.1 semantics), so a watch never
    disagrees with `rtenv push` or `rtenv check-ignore` about a path."""

    def __init__(self, root: Path, *, kind: str = "working_dir", excludes: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        from rtenv_cli.core.packaging.ignore import excludes_matcher

        self.root = Path(root).absolute()
        self.env = dict(os.environ if env is None else env)
        self.top = excludes_matcher(kind, list(excludes), self.env)  # type: ignore[arg-type]
        self._dirs: dict[str, tuple[tuple[Any, ...], list[Any]]] = {}

    def dir_matchers(self, directory: Path, rel: str) -> list[Any]:
        from rtenv_cli.core.errors import PackagingError
        from rtenv_cli.core.packaging.ignore import ignore_file_matchers

        stamps: list[tuple[int, int] | None] = []
        for name in IGNORE_FILES:
            try:
                st = (directory / name).stat()
                stamps.append((st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append(None)
        stamp = tuple(stamps)
        cached = self._dirs.get(rel)
        if cached is None or cached[0] != stamp:
            try:
                matchers = ignore_file_matchers(directory, rel, self.env)
            except PackagingError:  # unreadable: the snapshot's packaging reports it
                matchers = []
            cached = (stamp, matchers)
            self._dirs[rel] = cached
        return cached[1]

    def is_ignored(self, relpath: str, *, is_dir: bool | None = None) -> bool:
        """Whether Ray's walk would skip `relpath` (or one of its ancestors)."""
        from rtenv_cli.core.packaging.ignore import first_match

        del is_dir  # Ray tests paths without a trailing slash, so directory-only rules do not apply
        parts = [p for p in relpath.replace(os.sep, "/").split("/") if p and p != "."]
        active: list[Any] = [self.top] if self.top is not None else []
        current = self.root
        chain = [".", *("/".join(parts[: i + 1]) for i in range(len(parts)))]
        for depth, rel in enumerate(chain):
            if depth > 0:
                current = current / parts[depth - 1]
            if current.is_dir():
                active.extend(self.dir_matchers(current, rel))
            if first_match(active, rel) is not None:
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

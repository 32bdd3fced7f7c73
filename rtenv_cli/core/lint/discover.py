"""Which files `rtenv validate` checks in a directory (or, given no path, in the current one),
the way `ruff check` finds Python files.

- Files named like a runtime_env: `*runtime_env*` and `*runtime-env*` with .yaml/.yml/.json.
- Ray Serve configs and job specs: other .yaml/.yml/.json files whose name says so (`serve`,
  `job`), kept only when their content is one (an `applications:` list; a `runtime_env:` with an
  `entrypoint`), so a CI workflow's `jobs.yaml` is not taken for one.
- runtime_envs by content, whatever their name (`job_env.yaml`): a small .yaml/.yml/.json file
  (at most `CONTENT_MAX_BYTES`) that is a mapping whose keys are all runtime_env fields (the
  field table of spec/model.py, and rtenv's own field). A CI workflow (`on:`, `jobs:`) or a k8s
  manifest (`apiVersion:`) has other keys; a YAML file's unindented keys are read first, so most
  other files are turned down without a parse.
- Never what a .gitignore ignores (each directory's own .gitignore applies below it, as git
  reads them), nor the folders of tools and environments (.git, .venv, venv, node_modules,
  __pycache__, .tox).

`--glob` replaces the name patterns; its matches are checked whatever their content.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SKIP_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".tox"})
_CONFIG_SUFFIXES = (".yaml", ".yml", ".json")
_FORM_WORDS = ("serve", "job")
CONTENT_MAX_BYTES = 64 * 1024  # a runtime_env is a few KiB; larger files are not read
_TOP_KEY = re.compile(r"^([^\s#'\"{\[\-][^:#]*?)\s*:(?:\s|$)", re.M)  # an unindented `key:`


def find_files(root: Path, globs: Sequence[str], *, by_content: bool) -> list[str]:
    """The files to check under `root`, sorted; `by_content` adds Serve configs and job specs
    found by name and content (the default discovery, not `--glob`)."""
    from rtenv_cli.core.packaging.ignore import compile_lines

    found: list[str] = []
    matchers: dict[str, Any] = {}  # directory (relative to root) -> its .gitignore matcher

    def ignored(rel: str) -> bool:
        """git's rule: a path is ignored by the .gitignore of any directory above it. A folder
        is tested by a child no pattern names ("/\0"), so that `outputs/` prunes the whole
        folder: git never looks inside an excluded folder, and neither does the walk."""
        parts = rel.split("/")
        for depth in range(len(parts)):
            base = "/".join(parts[:depth]) or "."
            matcher = matchers.get(base)
            if matcher is not None and matcher.decide(rel) is not None:
                return True
        return False

    for current, dirs, files in os.walk(root):
        here = Path(current)
        rel_dir = here.relative_to(root).as_posix()
        if ".gitignore" in files:
            try:
                lines = (here / ".gitignore").read_text(errors="replace").splitlines()
                matchers[rel_dir] = compile_lines([(line, line) for line in lines], rel_dir)
            except (OSError, ValueError):
                pass  # an unreadable or odd .gitignore ignores nothing
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not ignored(prefix + d)
                         and not ignored(f"{prefix}{d}/\0"))
        for name in sorted(files):
            if ignored(prefix + name):
                continue
            if any(fnmatch.fnmatch(name, g) for g in globs) or \
                    (by_content and (_serve_or_job(here / name) or
                                     _runtime_env_by_content(here / name))):
                found.append(str(here / name))
    return sorted(found)


def _serve_or_job(path: Path) -> bool:
    name = path.name.lower()
    if not name.endswith(_CONFIG_SUFFIXES) or not any(w in name for w in _FORM_WORDS):
        return False
    from rtenv_cli.core.spec.loader import load_path
    from rtenv_cli.core.spec.locate import document_kind

    doc = load_path(path)
    return doc.error is None and document_kind(doc) in ("serve", "job")


def _runtime_env_by_content(path: Path) -> bool:
    """A small YAML/JSON mapping whose keys are all runtime_env fields (see the docstring)."""
    if not path.name.lower().endswith(_CONFIG_SUFFIXES):
        return False
    try:
        if path.stat().st_size > CONTENT_MAX_BYTES:
            return False
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    from rtenv_cli.core.spec.model import ALL_TOP_LEVEL_KEYS, RTENV_FIELD

    fields = ALL_TOP_LEVEL_KEYS | {RTENV_FIELD}
    if any(key.strip() not in fields for key in _TOP_KEY.findall(text)):
        return False  # an unindented key that is no runtime_env field: no parse needed
    from rtenv_cli.core.spec.loader import load_text

    data = load_text(text, str(path)).data
    return isinstance(data, dict) and bool(data) and all(
        isinstance(k, str) and k in fields for k in data)

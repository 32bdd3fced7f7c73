"""What an `excludes` pattern that matches nothing means: a mistake, a repeat of Ray's defaults,
or a guard for files a job creates later.

Ray matches each pattern (gitwildmatch, pathspec 0.8.1) against paths relative to the package
root, such as `outputs/run1/model.ckpt`: never with a leading `/` or `./`, never with `..`, `//`
or `\\`. A pattern that matches no packaged path today is one of three things:

- **can never match** (RTE122, a warning): no path inside a package can satisfy it, or it names
  something no project holds while the tree shows what was meant. Exactly these:
  - an absolute path of this machine (`/home/me/proj/data/`): excludes are relative to the
    package root; the fix is the path relative to it, anchored (`/data/`);
  - a `./` or `~/` prefix, a `..`, `.` or empty (`//`) segment, or a backslash used as a
    separator (`logs\\old`): those never occur in the paths Ray matches;
  - an extension written as a name (`.log`, meant as `*.log`): a name that is a known file
    extension, or the extension of files in the tree, with no file or folder of that exact name;
  - a dot added to a folder name (`/.node_modules/`, meant as `/node_modules/`): the undotted
    name is a folder in the tree or a well-known one, the dotted one exists nowhere, and the
    dotted name is not a real dot-folder (`.cache`, `.venv`, ...).
- **redundant with Ray's default excludes** (RTE123, info): it matches a folder the defaults
  (`.git`, `.venv`, `venv`, `__pycache__`, or RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES) already
  drop from every working_dir, such as `.git`, `**/__pycache__/` or `venv/`.
- **nothing yet** (no finding): `outputs/`, `checkpoints/`, `*.ckpt` protect against files the
  job or a later run will create; that is what excludes are for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KNOWN_EXTENSIONS = frozenset((
    "log", "out", "err", "tmp", "temp", "bak", "swp", "orig", "pyc", "pyo", "so", "o", "a",
    "whl", "egg", "zip", "tar", "gz", "tgz", "bz2", "xz", "7z", "rar", "pt", "pth", "ckpt",
    "bin", "safetensors", "onnx", "pb", "h5", "hdf5", "npy", "npz", "pkl", "pickle", "joblib",
    "parquet", "arrow", "feather", "csv", "tsv", "json", "jsonl", "txt", "db", "sqlite",
    "sqlite3", "mp4", "mp3", "wav", "png", "jpg", "jpeg", "gif", "tfrecord", "tfevents",
    "msgpack", "gguf", "ggml", "ipynb", "pdf", "iso", "dmg",
))
# real dot-files and dot-folders: a pattern naming one is meant as written
KNOWN_DOTNAMES = frozenset((
    ".git", ".github", ".gitignore", ".gitattributes", ".gitmodules", ".venv", ".env",
    ".envrc", ".tox", ".nox", ".cache", ".idea", ".vscode", ".DS_Store", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", ".hypothesis", ".coverage", ".eggs",
    ".local", ".config", ".ssh", ".aws", ".docker", ".dockerignore", ".rayignore",
    ".python-version", ".terraform", ".next", ".npm", ".yarn", ".gradle", ".dvc", ".pyre",
    ".pytype", ".benchmarks", ".netrc", ".kube", ".azure", ".gcloud", ".huggingface",
    ".secrets", ".secret", ".data", ".direnv", ".devcontainer", ".circleci", ".gitlab",
    ".history", ".trash", ".Trash",
))
# folders a project commonly has, that a stray dot turns into names nobody uses
WELL_KNOWN_DIRS = frozenset((
    "node_modules", "outputs", "output", "logs", "checkpoints", "ckpt", "wandb", "mlruns",
    "lightning_logs", "runs", "results", "data", "datasets", "models", "build", "dist", "tmp",
    "notebooks", "tests", "docs", "artifacts", "experiments", "saved_models",
))
_PROBE_CHILD = "rtenv-probe"  # a name no pattern aims at: `.git/` matches it, `*.pyc` does not
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Dead:
    """Why a pattern can never match, and the pattern that would (when there is one)."""

    why: str
    fix: str | None = None


def never_matches(pattern: str, tree: Sequence[str], roots: Sequence[Path]) -> Dead | None:
    """Whether `pattern` can never match a path inside a package (see the module docstring).

    `tree` holds the packaged paths of every local package, relative to its root (folders end
    in `/`); `roots` are the packages' absolute roots."""
    text = pattern.strip()
    if not text or text.startswith(("!", "#")):
        return None  # a negation keeps paths in; a comment is no pattern
    return (_absolute(text, roots) or _impossible_characters(text)
            or _impossible_segments(text) or _extension_as_name(text, tree)
            or _dotted_folder(text, tree))


def _absolute(text: str, roots: Sequence[Path]) -> Dead | None:
    path = Path(text.rstrip("/") or "/")
    if not path.is_absolute():
        return None
    why = ("it is an absolute path, and Ray matches excludes against paths relative to the "
           "package root")
    for root in roots:
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        if rel.parts:
            return Dead(why, "/" + rel.as_posix() + ("/" if text.endswith("/") else ""))
    min_parts = 3  # `/a/b`: one component is an anchored pattern (`/outputs`), not a path
    if len(path.parts) >= min_parts and path.exists():
        return Dead(why)
    return None


def _impossible_characters(text: str) -> Dead | None:
    if text.startswith("~"):
        return Dead("Ray does not expand `~` (it would match a folder literally named `~`)")
    if re.search(r"\\(?=[^*?\[\]!# \\])", text):
        return Dead("`\\` escapes the next character in a gitignore pattern; it is no separator",
                    text.replace("\\", "/"))
    if not text.strip("/"):
        return Dead("a pattern of slashes only matches no path (Ray's pathspec skips `/`)")
    return None


def _impossible_segments(text: str) -> Dead | None:
    anchored = text.startswith("/")
    trailing = text.endswith("/") and len(text) > 1
    parts = text.strip("/").split("/")
    if ".." in parts:
        return Dead("paths inside a package never contain `..` (each pattern applies within "
                    "each package root)")
    if parts and parts[0] == "." and len(parts) > 1:
        rest = "/".join(p for p in parts[1:] if p not in ("", "."))
        return Dead(f"Ray matches paths relative to the package root, like `{rest}`, never "
                    f"`{text}`",
                    "/" + rest + ("/" if trailing else ""))
    if "." in parts or "" in parts:
        rest = "/".join(p for p in parts if p not in ("", "."))
        return Dead("the paths Ray matches never contain `/./` or `//`",
                    ("/" if anchored else "") + rest + ("/" if trailing else ""))
    return None


def _dot_name(text: str, shape: str) -> tuple[str, str, str] | None:
    """(the pattern before its last name, that name, the trailing `/` or "") when the last name
    is a dot-name of `shape` without globs that is not a real dot-file (`.env`, `.cache`)."""
    body = text.rstrip("/")
    head, _, last = body.rpartition("/")
    if not last or _GLOB.search(last) or not re.fullmatch(shape, last) or \
            last in KNOWN_DOTNAMES:
        return None
    return ((head + "/" if head or body.startswith("/") else ""), last,
            "/" if text.endswith("/") else "")


def _names(tree: Sequence[str]) -> set[str]:
    return {rel.rstrip("/").rpartition("/")[2] for rel in tree}


def _extension_as_name(text: str, tree: Sequence[str]) -> Dead | None:
    found = _dot_name(text, r"\.[A-Za-z0-9]{1,12}")
    if found is None:
        return None
    head, last, trailing = found
    names = _names(tree)
    if last in names or not (last[1:].lower() in KNOWN_EXTENSIONS
                             or any(n.endswith(last) for n in names)):
        return None
    return Dead(f"it matches only a file or folder named exactly `{last}`, not files ending in "
                f"`{last}`", f"{head}*{last}{trailing}")


def _dotted_folder(text: str, tree: Sequence[str]) -> Dead | None:
    found = _dot_name(text, r"\.[A-Za-z0-9_-]+")
    if found is None:
        return None
    head, last, trailing = found
    names = _names(tree)
    plain = last[1:]
    if last in names or not (plain in WELL_KNOWN_DIRS or plain in names):
        return None
    return Dead(f"no folder is named `{last}` (the folder is `{plain}`)",
                f"{head}{plain}{trailing}")


def default_covered(matcher: Any, defaults: Sequence[str]) -> str | None:
    """The default exclude (`.git`, `__pycache__`, ...) whose folder `matcher` (one compiled
    excludes pattern) matches, at the root or deeper: the pattern repeats Ray's default. Only
    the folder is probed: `*.pyc` also matches files outside `__pycache__`, so it repeats
    nothing."""
    for name in defaults:
        probes = (name, f"{name}/{_PROBE_CHILD}", f"pkg/{name}", f"pkg/{name}/{_PROBE_CHILD}")
        if any(matcher.decide(p) is not None for p in probes):
            return name
    return None

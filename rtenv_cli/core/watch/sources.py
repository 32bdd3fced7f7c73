"""What a watch follows: the runtime_env (read and validated as `rtenv push` reads it) and its
local sources, discovered by push's own `package_runtime_env`, each with a snapshot of its tree
and what was last published from it."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rtenv_cli.core.errors import ConfigError, UnsupportedError
from rtenv_cli.core.push import (
    PackagePlan,
    load_input,
    package_runtime_env,
    require_source,
    validate,
)
from rtenv_cli.core.watch.filters import is_dependency_file
from rtenv_cli.core.watch.snapshot import Snapshot
from rtenv_cli.core.watch.zipcache import BuiltZip

if TYPE_CHECKING:
    from rtenv_cli.core.watch.delta import Held


@dataclass
class Source:
    label: str  # "working_dir" or "py_modules[0]"
    snap: Snapshot
    pushed: str | None = None  # the URI last published from it
    # a zip target's state: the last zip published (the next one splices from it), and the
    # zip built during the quiet period, for its snapshot's URI
    last_zip: BuiltZip | None = None
    prepared: BuiltZip | None = None
    # a delta target's state: the blobs it holds, and the manifest it holds as `pushed`
    known_blobs: set[str] = field(default_factory=set)
    last_manifest: Held | None = None
    # a tree target's state: the rtenv-tree:// URI of the manifest published as `pushed`
    tree_uri: str | None = None


class WatchedEnv:
    """The runtime_env at `path` (a file, or a directory: the working_dir) and its sources.
    Relative paths resolve against `base_dir`; `outputs` are files rtenv rewrites (push -o),
    never packaged."""

    def __init__(self, path: Path, base_dir: Path, outputs: Sequence[Path]) -> None:
        if not path.exists():
            raise ConfigError(f"{path} does not exist", path=str(path),
                              hint="pass a directory (the working_dir) or a runtime_env file")
        self.path, self.base_dir, self.outputs = path, base_dir, tuple(outputs)
        self.env_file: Path | None = None if path.is_dir() else path
        self.runtime_env: dict[str, Any] = {}
        self.sources: list[Source] = []

    def load(self) -> tuple[dict[str, Any], list[Source]]:
        """The runtime_env read again and its sources; a source whose path and excludes did
        not change keeps its Source (its snapshot and last zip). ConfigError when invalid."""
        data, base, label = load_input(self.path, base_dir=self.base_dir)
        if self.env_file is not None:
            validate(data, base, label, os.environ)
        old = {(s.label, str(s.snap.root), tuple(s.snap.excludes)): s for s in self.sources}
        return data, [old.get((p.field, str(p.source), p.excludes))
                      or Source(p.field, Snapshot(p.source, p.kind, p.excludes))
                      for p in self._plans(data)]

    def adopt(self, runtime_env: dict[str, Any], sources: list[Source]) -> list[Source]:
        """Follow `runtime_env` and `sources` from now on; returns the sources dropped."""
        before = self.sources
        self.runtime_env, self.sources = runtime_env, sources
        return [s for s in before if all(s is not n for n in sources)]

    def _plans(self, env: Mapping[str, Any]) -> list[PackagePlan]:
        """push's source discovery, with the sources a watch can follow (directories)."""
        plans = package_runtime_env(env, self.base_dir, self.outputs)
        for plan in plans:
            require_source(plan)
            if not plan.source.is_dir():
                raise UnsupportedError(
                    f"{plan.field} {plan.source} is a local file; --watch packages directories "
                    "only", path=str(self.env_file or self.path),
                    hint="push file modules and wheels once with `rtenv push`, then watch the "
                    "directories")
        return plans

    def is_env_path(self, path: str) -> bool:
        """The runtime_env file itself, or a dependency file (requirements.txt, ...)."""
        return path == str(self.env_file) or is_dependency_file(path)

    def roots(self) -> list[Path]:
        """What to watch: every source's tree, and the runtime_env file when outside them."""
        roots = [s.snap.root for s in self.sources]
        env_file = self.env_file
        if env_file is not None and all(env_file.parent != r and r not in env_file.parents
                                        for r in roots):
            roots.append(env_file)  # watched through its directory
        return roots

    def published_env(self, published_uri: Callable[[str], str]) -> dict[str, Any]:
        """The runtime_env with each source replaced by its current URI as the target
        publishes it."""
        env = copy.deepcopy(self.runtime_env)
        for src in self.sources:
            uri = published_uri(src.snap.uri)
            if src.label == "working_dir":
                env["working_dir"] = uri
            else:
                index = int(src.label[len("py_modules["):-1])
                env["py_modules"][index] = uri
        env.pop("excludes", None)  # applied by packaging; Ray ignores it for gcs:// URIs
        return env


def runtime_env_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    import difflib
    import json

    a = json.dumps(old, indent=2, sort_keys=True).splitlines()
    b = json.dumps(new, indent=2, sort_keys=True).splitlines()
    return "\n".join(line for line in difflib.unified_diff(a, b, "before", "after", lineterm="",
                                                           n=1))

"""Ray 2.60's ignore semantics: `excludes`, default excludes, per-directory .gitignore/.rayignore.

Ray (packaging.py `_dir_travel`, `_get_excludes`, `_get_ignore_file`) compiles each source with
its vendored pathspec 0.8.1 `gitwildmatch` into a separate matcher; a path is dropped when ANY
active matcher matches it (last match wins only *within* one list), and a directory's own ignore
files are active before the directory itself is tested (its path relative to them is ".").

We use pathspec's public `GitIgnoreSpec` (its patterns are `GitIgnoreSpecPattern` in 1.x).
It translates patterns like 0.8.1 for everything we test against Ray's own functions (`*`
matching ".", `dir/` not matching the directory itself), with two differences handled in
`_normalize`: 0.8.1 strips leading AND trailing whitespace of every line (1.x keeps leading
spaces and honours an escaped trailing space), and 0.8.1 drops a dangling trailing backslash
(1.x rejects it). And one in `_pattern`: 0.8.1 gives a *negated* non-directory pattern no
"and everything below" suffix (`!.git` matches ".git" only, not ".git/HEAD"), while 1.x treats
negations like positives; with Ray's default `.git` exclude, excludes: ["!.git"] keeps ".git"
but still drops its files. 1.x regexes are applied with `search`, like 1.x does.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from rtenv_cli.core.errors import ConfigError, PackagingError

Kind = Literal["working_dir", "py_module"]
RAY_DEFAULT_EXCLUDES = ".git,.venv,venv,__pycache__"
IGNORE_GITIGNORE_ENV = "RAY_RUNTIME_ENV_IGNORE_GITIGNORE"
DEFAULT_EXCLUDES_ENV = "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES"


def default_excludes(env: Mapping[str, str]) -> list[str]:
    """Ray's working_dir default excludes (comma list, overridable; empty means none)."""
    val = env.get(DEFAULT_EXCLUDES_ENV, RAY_DEFAULT_EXCLUDES)
    return [x.strip() for x in val.split(",") if x.strip()]


def use_gitignore(env: Mapping[str, str]) -> bool:
    return env.get(IGNORE_GITIGNORE_ENV, "0") != "1"


def _normalize(line: str) -> str:
    s = line.strip()
    if (len(s) - len(s.rstrip("\\"))) % 2 == 1:
        s = s[:-1]  # a dangling escape: 0.8.1 ignores it, 1.x raises
    return s


# "the path itself or anything below it", as pathspec 1.x and 0.12 end a pattern
_DESCENDANTS = ("(?:(?P<ps_d>/)|$)", "(?:(?P<ps_d>/).*)?$")


class Pattern(NamedTuple):
    """What the walk needs of a pathspec pattern: include (None: matches nothing), regex."""

    include: bool | None
    regex: re.Pattern[str]


def _pattern(text: str) -> Pattern:
    """`text` translated by pathspec, through a persistent cache: importing pathspec costs more
    than the rest of a re-push's ignore handling (see _Translations; benchmarks/results/
    fastpaths.json: "import pathspec")."""
    known = _TRANSLATIONS.get(text)
    if known is not None:
        return Pattern(known[0], re.compile(known[1]))
    from pathspec import GitIgnoreSpec  # public: its patterns are git's own wildmatch

    pat = GitIgnoreSpec.from_lines([text]).patterns[0]
    regex = pat.regex.pattern if pat.regex is not None else ""
    if pat.include is False:
        for ending in _DESCENDANTS:
            if regex.endswith(ending):
                regex = regex[:-len(ending)] + "$"
                break
    _TRANSLATIONS.add(text, pat.include, regex)
    return Pattern(pat.include, re.compile(regex))


class _Translations:
    """Pattern text -> (include, regex) as this pathspec translates it, kept in one marshalled
    file under the rtenv home. Keyed by pathspec's own file (path, size, mtime): another
    pathspec version starts afresh. Best effort: any error means translating again."""

    def __init__(self) -> None:
        self._data: dict[str, tuple[bool | None, str]] | None = None
        self._key: tuple[int | str | None, ...] = ()  # marshalled: plain values only
        self._path: Path | None = None  # fixed at the first use: saved there at exit
        self._added = False

    def _load(self) -> dict[str, tuple[bool | None, str]]:
        if self._data is None:
            import marshal
            from importlib.util import find_spec

            from rtenv_cli.core.errors import RtenvError
            from rtenv_cli.core.paths import rtenv_home

            self._data = {}
            try:
                self._path = rtenv_home() / "ignore-patterns.marshal"
            except RtenvError:  # no home this user alone can write: no cache, read or kept
                return self._data
            with contextlib.suppress(Exception):  # no pathspec: translating raises later
                spec = find_spec("pathspec")
                origin = spec.origin if spec is not None else None
                st = os.stat(origin) if origin else None
                self._key = (_TRANSLATION_VERSION, origin, st.st_size if st else None,
                             st.st_mtime_ns if st else None)
                # rtenv's own file in the user's cache dir: see digest_cache._MARSHAL
                key, data = marshal.loads(self._path.read_bytes())  # noqa: S302
                if key == self._key and isinstance(data, dict):
                    self._data = data
        return self._data

    def get(self, text: str) -> tuple[bool | None, str] | None:
        return self._load().get(text)

    def add(self, text: str, include: bool | None, regex: str) -> None:
        self._load()[text] = (include, regex)
        if not self._added:
            self._added = True
            import atexit

            atexit.register(self.save)

    def save(self) -> None:
        import marshal

        path = self._path
        if self._data is None or not self._key or path is None:
            return
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(marshal.dumps((self._key, self._data)))
            os.replace(tmp, path)


_TRANSLATION_VERSION = 1  # bump when _pattern's own post-processing changes
_TRANSLATIONS = _Translations()


@dataclass
class Matcher:
    """One pattern list (one ignore file, or the excludes list) anchored at `base_rel`."""

    base_rel: str  # the anchor directory relative to the package root ("." = root)
    rules: list[tuple[str, Any]]  # (source label, compiled pattern), in file order

    def __post_init__(self) -> None:
        import re

        # Fast path: without negations, one alternation answers "is it matched at all";
        # the per-rule loop only runs for hits (to name the rule) and lists with negations.
        self.combined = None
        if all(p.include for _l, p in self.rules):
            parts = [p.regex.pattern.replace("(?P<ps_d>", "(") for _l, p in self.rules]
            self.combined = re.compile("|".join(f"(?:{x})" for x in parts))

    def rel(self, relpath: str) -> str:
        if self.base_rel == ".":
            return relpath
        if relpath == self.base_rel:
            return "."
        return relpath[len(self.base_rel) + 1:]

    def decide(self, relpath: str) -> str | None:
        """The label of the rule that ignores `relpath`, or None (kept / negated)."""
        path = self.rel(relpath)
        if self.combined is not None and self.combined.search(path) is None:
            return None
        for label, pat in reversed(self.rules):
            if pat.include is not None and pat.regex.search(path) is not None:
                return label if pat.include else None
        return None


def compile_lines(lines: Sequence[tuple[str, str]], base_rel: str) -> Matcher | None:
    """`lines` = (label, raw line); comments/blank lines drop out. None when nothing is left."""
    rules: list[tuple[str, Any]] = []
    for label, raw in lines:
        text = _normalize(raw)
        if not text or text.startswith("#") or text in ("/", "!/"):
            continue  # "/" and "!/" match no path in 0.8.1 (1.x: "!/" re-includes all)
        try:
            pat = _pattern(text)
        except ValueError as exc:
            raise ConfigError(f"{label}: invalid pattern: {exc}",
                              hint="fix or remove the pattern (gitignore syntax)") from exc
        if pat.include is not None:
            rules.append((label, pat))
    return Matcher(base_rel, rules) if rules else None


def excludes_matcher(kind: Kind, excludes: Sequence[str], env: Mapping[str, str]
                     ) -> Matcher | None:
    """Ray's single excludes list: defaults (working_dir only) followed by the user's."""
    lines: list[tuple[str, str]] = []
    if kind == "working_dir":
        lines += [(f"ray-default:{p}", p) for p in default_excludes(env)]
    lines += [(f"excludes[{i}]:{p.strip()}", p) for i, p in enumerate(excludes)]
    return compile_lines(lines, ".")


def ignore_file_matchers(dir_path: Path | str, dir_rel: str, env: Mapping[str, str]
                         ) -> list[Matcher]:
    """Matchers of `dir_path`'s own .gitignore (unless disabled) and .rayignore."""
    names = (".gitignore", ".rayignore") if use_gitignore(env) else (".rayignore",)
    out: list[Matcher] = []
    for name in names:
        f = os.path.join(dir_path, name)
        if not os.path.isfile(f):
            continue
        shown = name if dir_rel == "." else f"{dir_rel}/{name}"
        try:
            with open(f) as fh:
                lines = fh.readlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise PackagingError(f"cannot read {f}: {exc}",
                                 hint="fix its permissions or encoding", path=f) from exc
        m = compile_lines([(f"{shown}:{i}:{ln.strip()}", ln) for i, ln in
                           enumerate(lines, 1)], dir_rel)
        if m is not None:
            out.append(m)
    return out


def first_match(matchers: Sequence[Matcher], relpath: str) -> str | None:
    for m in matchers:
        label = m.decide(relpath)
        if label is not None:
            return label
    return None


def any_match(matchers: Sequence[Matcher]) -> Callable[[str], bool]:
    """A quick "might any of these match?" for the many paths of one directory: one regex
    search when every matcher is anchored at the root and has no negations (the usual case:
    Ray's default excludes, `excludes`, a top-level .gitignore), else always True (ask
    `first_match`). False means no matcher matches; True is confirmed by `first_match`."""
    if not matchers:
        return lambda _path: False
    if any(m.base_rel != "." or m.combined is None for m in matchers):
        return lambda _path: True
    key = tuple(m.combined.pattern for m in matchers)  # type: ignore[union-attr]
    search = _ANY_MATCH.get(key)
    if search is None:
        import re

        search = re.compile("|".join(f"(?:{p})" for p in key)).search
        _ANY_MATCH[key] = search
    return lambda path: search(path) is not None


_ANY_MATCH: dict[tuple[str, ...], Callable[[str], object]] = {}


@dataclass(frozen=True)
class IgnoreDecision:
    path: str  # as given
    ignored: bool
    source: str | None  # e.g. ".gitignore:3:*.ckpt", "excludes[1]:*.log", "ray-default:.git"

    def to_dict(self) -> dict[str, object]:
        return {"path": self.path, "ignored": self.ignored, "source": self.source}


def check_ignore(root: Path, paths: Sequence[str | Path], kind: Kind,
                 excludes: Sequence[str] = (), env: Mapping[str, str] | None = None
                 ) -> list[IgnoreDecision]:
    """For each path (relative to `root` or absolute inside it): is it packaged, and why not.

    A path is ignored when it or one of its ancestors is matched, walking down from the root
    the way Ray's walk does (each directory's ignore files join before it is tested).
    """
    env = os.environ if env is None else env
    root = Path(root).absolute()
    base = excludes_matcher(kind, excludes, env)
    cache: dict[str, list[Matcher]] = {}

    def own(rel: str) -> list[Matcher]:
        if rel not in cache:
            cache[rel] = ignore_file_matchers(root if rel == "." else root / rel, rel, env)
        return cache[rel]

    out = []
    for given in paths:
        p = Path(given)
        absolute = p if p.is_absolute() else root / p
        try:
            rel = absolute.relative_to(root).as_posix()
        except ValueError:
            raise PackagingError(f"{given} is outside the package {root}",
                                 hint="pass paths inside the package directory") from None
        parts = [] if rel in ("", ".") else rel.split("/")
        chain = ["."] + ["/".join(parts[:i + 1]) for i in range(len(parts))]
        active: list[Matcher] = [base] if base else []
        source = None
        for r in chain:
            if os.path.isdir(root / r):
                active = active + own(r)
            source = first_match(active, r)
            if source is not None:
                break
        out.append(IgnoreDecision(str(given), source is not None, source))
    return out

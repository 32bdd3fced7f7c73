"""The tree format in a cluster's KV (namespace `rtenv`), one key per kind of record:

    p:<pack>      a pack: file contents concatenated (a few MB; a bigger file alone)
    x:<pack>      the pack's index, written after the pack: {"t": time, "files": [[sha256,
                  offset, size], ...]}; a pusher learns what the cluster has from these
    m:<manifest>  a manifest, written last (after every pack it names): zlib of JSON, full or
                  a delta against a base manifest (a chain of at most MAX_DEPTH deltas)
    t:<manifest>  when the manifest was last pushed (the gc's grace period counts from it)
    n:<node>      a node whose runtime-env agent loads rtenv's plugin (written by the plugin)
    r:<manifest>:<node>  a node's plugin holds the manifest's tree (a live worker uses it)

A manifest's id is the sha256 of its tree (kind, paths, modes, sizes, content digests, empty
directories), not of where the contents lie, so a tree pushed twice has one id. A tree is the
file set Ray would zip (packaging/walk.py): symlinks followed (a link is its target's content,
as in Ray's zip), directories kept only when empty on disk. A py_module's paths start with its
directory's name (the layout of Ray's py_modules zip), a working_dir's do not.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rtenv_cli.core.errors import RtenvError

SCHEME = "rtenv-tree://"
_HEX64 = re.compile(r"[0-9a-f]{64}")
MAX_DEPTH = 8  # deltas in a chain before a full manifest is written again
VERSION = 1
# zlib's fastest level: a manifest is mostly hex digests, which level 6 shrinks only a few
# percent more, at three times the CPU of a cold push's manifest
_LEVEL = 1


class TreeFormatError(RtenvError):
    """A manifest or pack index that does not parse (a foreign key in rtenv's namespace)."""


class FileEntry(NamedTuple):  # a tuple: 10k of them are built per push and per node build
    path: str
    mode: int
    size: int
    digest: str  # sha256 hex of the content
    pack: str  # where the content lies in the cluster
    offset: int


@dataclass
class Manifest:
    kind: str  # working_dir | py_module
    files: dict[str, FileEntry] = field(default_factory=dict)
    dirs: dict[str, int] = field(default_factory=dict)  # empty directories -> mode

    @functools.cached_property
    def id(self) -> str:
        """`tree_id` of the manifest. Computed once: a manifest is not changed after its id is
        read."""
        return tree_id(self.kind, self.files.values(), self.dirs)

    @property
    def uri(self) -> str:
        return SCHEME + self.id

    @property
    def packs(self) -> set[str]:
        return {f.pack for f in self.files.values()}

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files.values())

    def encode(self, base: Manifest | None = None, base_id: str | None = None,
               depth: int = 0) -> bytes:
        """The KV value: full, or the changes against `base` (whose id is `base_id`)."""
        return encode_doc(self.doc(base, base_id, depth))

    def doc(self, base: Manifest | None = None, base_id: str | None = None,
            depth: int = 0) -> dict[str, Any]:
        """The manifest as JSON (what `encode` compresses; `apply` reads it back)."""
        if base is None:
            return value_doc(self.kind, self.dirs, self.files.values())
        old = base.files
        files = [f for p, f in self.files.items()
                 if (b := old.get(p)) is not f and b != f]  # mostly the same objects
        return value_doc(self.kind, self.dirs, files, base_id=base_id, depth=depth,
                         deleted=sorted(p for p in base.files if p not in self.files))


def tree_id(kind: str, files: Iterable[Sequence[Any]], dirs: Mapping[str, int]) -> str:
    """sha256 of a tree (`files`: FileEntry-shaped records): one NUL-separated line per file
    (sorted), then per empty directory."""
    lines = sorted(f"{f[0]}\0{f[1]}\0{f[2]}\0{f[3]}" for f in files)
    lines += sorted(f"{p}\0{m}\0dir" for p, m in dirs.items())
    h = hashlib.sha256(f"{kind}\n".encode())
    h.update("\n".join(lines).encode(errors="surrogateescape"))
    return h.hexdigest()


def value_doc(kind: str, dirs: Mapping[str, int], files: Iterable[Sequence[Any]], *,
              base_id: str | None = None, depth: int = 0, deleted: Sequence[str] = ()
              ) -> dict[str, Any]:
    """A manifest value's JSON: every file of the tree (`files`: FileEntry-shaped records), or,
    with `base_id`, the files that differ from that base and the paths it `deleted`."""
    doc: dict[str, Any] = {"v": VERSION, "kind": kind, "dirs": dict(dirs)}
    if base_id is not None:
        doc["base"], doc["depth"], doc["del"] = base_id, depth, list(deleted)
    files = list(files)
    packs = sorted({f[4] for f in files})
    number = {p: i for i, p in enumerate(packs)}
    doc["packs"] = packs
    doc["files"] = [[f[0], f[1], f[2], f[3], number[f[4]], f[5]] for f in files]
    return doc


def encode_doc(doc: Mapping[str, Any]) -> bytes:
    """The KV value of a manifest's JSON (`value_doc`)."""
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), _LEVEL)


def decode(raw: bytes) -> dict[str, Any]:
    """A manifest value as stored (full or delta): check its shape, not its chain."""
    try:
        doc: dict[str, Any] = json.loads(zlib.decompress(raw))
        if doc.get("v") != VERSION or not isinstance(doc.get("files"), list):
            raise ValueError("not a version-1 manifest")
    except (ValueError, zlib.error) as exc:
        raise TreeFormatError(f"a manifest in the cluster's KV does not parse: {exc}",
                              hint="it was not written by this rtenv; push again") from exc
    return doc


def safe_path(path: str) -> str:
    """`path` when it stays inside the tree (relative, no `..`, no empty part), else a
    TreeFormatError: a manifest comes from the cluster's KV, which anyone with the cluster's
    token can write."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or "\0" in path:
        raise TreeFormatError(f"a manifest names the path {path!r}, outside its tree",
                              hint="a foreign key in the `rtenv` KV namespace; push again")
    return path


def apply(doc: Mapping[str, Any], base: Manifest | None) -> Manifest:
    """The full manifest of a decoded value (`base`: the full manifest of its base); every
    path checked with `safe_path`, every mode cut to permission bits (no setuid, setgid or
    sticky bit)."""
    packs = doc["packs"]
    out = Manifest(doc["kind"], dict(base.files) if base is not None else {},
                   {safe_path(str(k)): int(v) & 0o777 for k, v in doc.get("dirs", {}).items()})
    for path in doc.get("del", ()):
        out.files.pop(path, None)
    for path, mode, size, digest, pack, offset in doc["files"]:
        if not _HEX64.fullmatch(str(digest)):  # it names a file of the node's object store
            raise TreeFormatError(f"a manifest gives {path!r} the digest {digest!r}",
                                  hint="a foreign key in the `rtenv` KV namespace; push again")
        out.files[safe_path(path)] = FileEntry(path, int(mode) & 0o777, int(size), str(digest),
                                               packs[pack], int(offset))
    return out


def manifest_id(uri: str) -> str:
    if not uri.startswith(SCHEME):
        raise TreeFormatError(f"{uri!r} is not an rtenv tree URI",
                              hint=f"rtenv push writes {SCHEME}<id>")
    ident = uri.removeprefix(SCHEME)
    if len(ident) != 64 or any(c not in "0123456789abcdef" for c in ident):  # noqa: PLR2004
        raise TreeFormatError(f"{uri!r} is not an rtenv tree URI",
                              hint=f"{SCHEME} is followed by a 64-hex manifest id")
    return ident


def encode_index(files: list[tuple[str, int, int]], now: float) -> bytes:
    return zlib.compress(json.dumps({"t": now, "files": files}).encode(), _LEVEL)


def decode_index(raw: bytes) -> tuple[float, list[tuple[str, int, int]]]:
    try:
        doc = json.loads(zlib.decompress(raw))
        return float(doc["t"]), [(str(d), int(o), int(s)) for d, o, s in doc["files"]]
    except (ValueError, KeyError, TypeError, zlib.error) as exc:
        raise TreeFormatError(f"a pack index in the cluster's KV does not parse: {exc}",
                              hint="it was not written by this rtenv") from exc


def dump_local(m: Manifest, depth: int | None = None) -> bytes:
    """A full manifest for a local cache (the pusher's base, a node's chain): a JSON header
    line, then one NUL-separated record per file (cheaper than JSON to write and read for
    10k files; a file name cannot hold a NUL)."""
    packs = sorted(m.packs)
    number = {p: i for i, p in enumerate(packs)}
    head = json.dumps({"v": VERSION, "kind": m.kind, "dirs": m.dirs, "packs": packs,
                       "depth": depth, "id": m.id})
    body = "".join(f"{f.path}\0{f.mode}\0{f.size}\0{f.digest}\0{number[f.pack]}\0{f.offset}\0\n"
                   for f in m.files.values())
    return (head + "\n" + body).encode(errors="surrogateescape")


def load_local(raw: bytes) -> tuple[Manifest, int | None]:
    """`dump_local`'s manifest and depth (ValueError when it does not parse)."""
    text = raw.decode(errors="surrogateescape")
    head_line, _nl, body = text.partition("\n")
    head = json.loads(head_line)
    packs = head["packs"]
    m = Manifest(head["kind"], {}, {str(k): int(v) for k, v in head["dirs"].items()})
    for rec in body.split("\0\n"):
        if rec:
            path, mode, size, digest, pack, offset = rec.split("\0")
            m.files[path] = FileEntry(path, int(mode), int(size), digest, packs[int(pack)],
                                      int(offset))
    if head.get("id"):  # written by dump_local from this very manifest: not hashed again
        m.__dict__["id"] = head["id"]
    return m, head.get("depth")

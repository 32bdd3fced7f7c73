"""Crafted archives, byte by byte where zipfile/tarfile refuse to write them."""

from __future__ import annotations

import hashlib
import io
import stat
import struct
import tarfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

STORED, DEFLATED = 0, 8
_UTF8 = 0x800
EMPTY_ACC = b"00000000"


@dataclass
class Z:
    """One zip entry. `data` is the content; the other fields override what an honest writer
    would put in the headers (both local and central)."""

    name: str | bytes
    data: bytes = b""
    mode: int = 0o100644
    method: int = DEFLATED
    flags: int | None = None  # None: the UTF-8 flag when the name is not ASCII
    crc: int | None = None
    file_size: int | None = None
    payload: bytes | None = None  # the compressed bytes as stored


def _deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


def build_zip(entries: Sequence[Z], *, central: Iterable[int] | None = None) -> bytes:
    """A zip of `entries`; `central` lists which entries the central directory names, in
    order (repeat an index to list one local entry several times)."""
    out = io.BytesIO()
    records = []
    for e in entries:
        name = e.name.encode("utf-8") if isinstance(e.name, str) else e.name
        flags = e.flags if e.flags is not None else (0 if name.isascii() else _UTF8)
        payload = e.payload if e.payload is not None else (
            _deflate(e.data) if e.method == DEFLATED else e.data)
        crc = e.crc if e.crc is not None else zlib.crc32(e.data)
        size = e.file_size if e.file_size is not None else len(e.data)
        offset = out.tell()
        out.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, flags, e.method, 0, 0x21,
                              crc, len(payload), size, len(name), 0))
        out.write(name)
        out.write(payload)
        records.append((name, flags, e.method, crc, len(payload), size, e.mode, offset))
    cd_start = out.tell()
    chosen = list(central) if central is not None else list(range(len(entries)))
    for i in chosen:
        name, flags, method, crc, csize, size, mode, offset = records[i]
        out.write(struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 0x031E, 20, flags, method, 0, 0x21,
                              crc, csize, size, len(name), 0, 0, 0, 0, (mode & 0xFFFF) << 16,
                              offset))
        out.write(name)
    cd_size = out.tell() - cd_start
    out.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(chosen), len(chosen), cd_size,
                          cd_start, 0))
    return out.getvalue()


def link(name: str, target: str) -> Z:
    return Z(name, target.encode(), mode=stat.S_IFLNK | 0o777, method=STORED)


def chain(depth: int = 30) -> list[tuple[str, str]]:
    """Links `a0 -> .`, `a_k -> a_{k-1}/..`: each harmless alone, `a_k` is k levels up."""
    return [("a0", ".")] + [(f"a{k}", f"a{k - 1}/..") for k in range(1, depth)]


def tar_info(name: str, kind: bytes, *, linkname: str = "", mode: int = 0o644, data: bytes = b""
             ) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.size = kind, linkname, mode, len(data)
    return info, data


def build_tar_files(members: Sequence[tuple[tarfile.TarInfo, bytes]], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, format=tarfile.GNU_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def sha1_name(data: bytes, ext: str) -> str:
    """The `_ray_pkg_<sha1>` name Ray gives a local archive."""
    return f"_ray_pkg_{hashlib.sha1(data).hexdigest()}{ext}"  # noqa: S324 - Ray's scheme


def ray_hash_name(files: dict[str, bytes], dirs: Iterable[str] = ()) -> str:
    """The `_ray_pkg_<16 hex>.zip` name of a flat tree of `files` (plus directory `dirs`),
    computed here without any of the agent's checks."""
    acc = EMPTY_ACC
    every = {"."} | set(dirs)
    for rel in files:
        parts = rel.split("/")
        every.update("/".join(parts[:i]) for i in range(1, len(parts)))
    digests = [hashlib.sha1(d.encode()).digest() for d in sorted(every)]  # noqa: S324
    digests += [hashlib.sha1(rel.encode() + data).digest() for rel, data in files.items()]  # noqa: S324
    for d in digests:
        acc = bytes(a ^ b for a, b in zip(acc, d, strict=False))
    return f"_ray_pkg_{acc.hex()}.zip"


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path

"""Builders of real Ray packages (made by Ray itself) and crafted archives for the agent tests."""

from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path


def ray_package(src: Path, out_dir: Path, *, py_module: bool = False) -> tuple[str, Path]:
    """Zip `src` exactly as Ray 2.60 does; return (uri, zip path)."""
    from ray._private.runtime_env.packaging import create_package, get_uri_for_directory

    uri = get_uri_for_directory(str(src), include_gitignore=True)
    path = out_dir / uri.removeprefix("gcs://")
    create_package(str(src), path, include_parent_dir=py_module, include_gitignore=True)
    return uri, path


def make_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def crafted_zip(path: Path, members: list[tuple[str, bytes]], *,
                links: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def zip_bytes(members: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return buf.getvalue()

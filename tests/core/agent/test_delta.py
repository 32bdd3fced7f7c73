"""The delta protocol assembles Ray's zip from blobs and checks its URI."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rtenv_cli.core.agent import delta
from rtenv_cli.core.agent.store import Store
from rtenv_cli.core.errors import PackagingError
from tests.core.agent.helpers import make_tree, ray_package


def _manifest(src: Path, uri: str, kind: str = "working_dir") -> dict:
    entries = []
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_dir():
            if not any(path.iterdir()):
                entries.append({"path": rel, "is_dir": True, "mode": 0o755, "size": 0})
            continue
        data = path.read_bytes()
        entries.append({"path": rel, "is_dir": False, "mode": os.stat(path).st_mode & 0o777,
                        "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"uri": uri, "kind": kind, "name": src.name if kind == "py_module" else None,
            "entries": entries}


@pytest.mark.parametrize("kind", ["working_dir", "py_module"])
def test_commit_rebuilds_ray_package(tmp_path: Path, kind: str) -> None:
    src = make_tree(tmp_path / "mod", {"a.py": "a\n", "s/b.py": "b\n", "s/t/c.txt": "c"})
    (src / "hollow").mkdir()
    uri, _zip = ray_package(src, tmp_path, py_module=kind == "py_module")
    store = Store(tmp_path / "store")
    man = _manifest(src, uri, kind)
    need = delta.missing(store, delta.Manifest.parse(man))
    assert len(need) == 3
    with pytest.raises(PackagingError, match="missing"):
        delta.commit(store, delta.Manifest.parse(man))
    for entry in man["entries"]:
        if not entry["is_dir"]:
            store.put_blob(entry["sha256"], src / entry["path"])
    assert delta.missing(store, delta.Manifest.parse(man)) == []
    out = delta.commit(store, delta.Manifest.parse(man))
    assert out["uri"] == uri
    assert store.has_package(uri.removeprefix("gcs://"))


def test_commit_with_wrong_uri_is_rejected(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "a\n"})
    _uri, _zip = ray_package(src, tmp_path)
    store = Store(tmp_path / "store")
    man = _manifest(src, "gcs://_ray_pkg_0123456789abcdef.zip")
    store.put_blob(man["entries"][0]["sha256"], src / "a.py")
    with pytest.raises(PackagingError, match="does not match"):
        delta.commit(store, delta.Manifest.parse(man))
    assert not store.has_package("_ray_pkg_0123456789abcdef.zip")


def test_manifest_paths_must_stay_inside() -> None:
    with pytest.raises(PackagingError):
        delta.Manifest.parse({"uri": "gcs://_ray_pkg_0123456789abcdef.zip", "kind": "working_dir",
                              "entries": [{"path": "../x", "sha256": "0" * 64}]})

"""LocalStoreTarget: the push target with no address."""

from __future__ import annotations

from pathlib import Path

from rtenv_cli.core.transport.local_store import LocalStoreTarget
from tests.support.packages import make_tree, ray_package


def test_upload_exists_and_default_root(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"main.py": "print('hi')\n"})
    uri, pkg = ray_package(src, tmp_path)
    target = LocalStoreTarget()
    assert str(target.store.root).startswith(str(tmp_path))  # RTENV_HOME from conftest
    assert not target.exists(uri)
    seen = []
    target.upload(uri, pkg, on_progress=seen.append)
    assert target.exists(uri)
    assert seen == [pkg.stat().st_size]
    assert target.published_uri(uri) == uri
    assert target.max_upload_bytes is None

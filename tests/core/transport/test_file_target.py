from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.transport.base import Target
from rtenv_cli.core.transport.file_target import FileTarget
from rtenv_cli.core.transport.resolve import resolve_target


def test_atomic_publish_and_uri(tmp_path: Path) -> None:
    t = FileTarget((tmp_path / "shared").as_uri())
    assert isinstance(t, Target)
    src = tmp_path / "p.zip"
    src.write_bytes(b"zipdata")
    assert not t.exists("gcs://_ray_pkg_ab.zip")
    t.upload("gcs://_ray_pkg_ab.zip", src)
    assert t.exists("gcs://_ray_pkg_ab.zip")
    assert (tmp_path / "shared" / "_ray_pkg_ab.zip").read_bytes() == b"zipdata"
    assert [p.name for p in (tmp_path / "shared").iterdir()] == ["_ray_pkg_ab.zip"]
    assert t.published_uri("gcs://_ray_pkg_ab.zip") == \
        (tmp_path / "shared" / "_ray_pkg_ab.zip").as_uri()


def test_resolve(tmp_path: Path) -> None:
    assert isinstance(resolve_target(tmp_path.as_uri(), "http://ignored:1", {}), FileTarget)
    with pytest.raises(UsageError):
        resolve_target("ray://head:10001", None, {})
    with pytest.raises(UsageError):
        FileTarget("file://otherhost/x")

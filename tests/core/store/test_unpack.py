"""Crafted archives are refused before anything is written; Ray's own zips extract exactly."""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

import pytest

from rtenv_cli.core.store.unpack import Limits, UnsafeArchiveError, extract
from tests.support.packages import crafted_zip, make_tree, ray_package


def test_ray_zip_extracts_byte_for_byte(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"a.py": "print(1)\n", "sub/b.txt": "b"})
    (src / "empty").mkdir()
    _uri, pkg = ray_package(src, tmp_path)
    extract(pkg, tmp_path / "out")
    assert (tmp_path / "out/a.py").read_text() == "print(1)\n"
    assert (tmp_path / "out/sub/b.txt").read_text() == "b"
    assert (tmp_path / "out/empty").is_dir()


@pytest.mark.parametrize(("members", "links", "needle"), [
    ([("../evil.txt", b"x")], None, "escapes"),
    ([("a/../../evil.txt", b"x")], None, "escapes"),
    ([("/etc/evil.txt", b"x")], None, "absolute"),
    ([("ok.txt", b"x")], {"link": "/etc/passwd"}, "outside"),
    ([("ok.txt", b"x")], {"link": "../../etc"}, "escapes"),
    ([("ok.txt", b"x")], {"d/l": "..", "m": "d/l/.."}, "escapes"),  # a chain of links
])
def test_crafted_archives_are_refused_and_nothing_is_written(
        tmp_path: Path, members: list[tuple[str, bytes]], links: dict[str, str] | None,
        needle: str) -> None:
    archive = crafted_zip(tmp_path / "bad.zip", members, links=links)
    with pytest.raises(UnsafeArchiveError, match=needle):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "evil.txt").exists()
    assert not (tmp_path.parent / "evil.txt").exists()


def test_decompression_bomb_by_ratio(tmp_path: Path) -> None:
    archive = crafted_zip(tmp_path / "bomb.zip", [("zeros", b"\0" * (50 << 20))])
    assert zipfile.ZipFile(archive).infolist()[0].compress_size < (1 << 20)
    with pytest.raises(UnsafeArchiveError, match="decompression bomb"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_total_size_limit(tmp_path: Path) -> None:
    archive = crafted_zip(tmp_path / "big.zip", [(f"f{i}", bytes(range(256)) * 40)
                                                 for i in range(10)])
    with pytest.raises(UnsafeArchiveError, match="over the limit"):
        extract(archive, tmp_path / "out", limits=Limits(max_total_bytes=50_000))
    assert not (tmp_path / "out").exists()


def test_tar_traversal_refused(tmp_path: Path) -> None:
    evil = tmp_path / "x.txt"
    evil.write_text("x")
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(evil, arcname="../x.txt")
    with pytest.raises(UnsafeArchiveError, match="escapes"):
        extract(archive, tmp_path / "out")


def test_strip_top_level_like_ray_remote_zips(tmp_path: Path) -> None:
    archive = crafted_zip(tmp_path / "r.zip", [("proj-main/a.py", b"1"),
                                               ("proj-main/s/b.py", b"2")])
    extract(archive, tmp_path / "out", strip_top_level=True)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.py", "s"]

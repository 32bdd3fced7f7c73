from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from rtenv_cli.core.store.rayhash import verify_package
from rtenv_cli.core.watch.snapshot import Snapshot
from rtenv_cli.core.watch.zipcache import ContentChanged, build_zip


def test_rebuild_reuses_compressed_members(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d" / "empty").mkdir(parents=True)
    for i in range(20):
        (src / "d" / f"f{i}.txt").write_bytes(os.urandom(100) * 50)
    snap = Snapshot(src)
    snap.full_scan()
    first = build_zip(snap, tmp_path / "out")
    assert first.compressed == 20
    verify_package(first.path.name, first.path)  # the agent's verifier: content matches name
    (src / "d" / "f3.txt").write_text("new content\n")
    snap.update([str(src / "d" / "f3.txt")])
    second = build_zip(snap, tmp_path / "out", first)
    assert (second.reused, second.compressed) == (19, 1)
    verify_package(second.path.name, second.path)
    fresh = build_zip(snap, tmp_path / "fresh")  # no previous zip: every member written anew
    assert fresh.compressed == 20
    assert fresh.path.read_bytes() == second.path.read_bytes()
    with zipfile.ZipFile(second.path) as zf:
        assert zf.testzip() is None
        assert zf.read("d/f3.txt") == b"new content\n"
        assert zf.read("d/f0.txt") == (src / "d" / "f0.txt").read_bytes()
        assert "d/empty/" in zf.namelist()
        mode = zf.getinfo("d/f0.txt").external_attr >> 16
        assert mode == (src / "d" / "f0.txt").stat().st_mode


def test_py_module_layout(tmp_path: Path) -> None:
    mod = tmp_path / "mylib"
    mod.mkdir()
    (mod / "__init__.py").write_text("x = 1\n")
    snap = Snapshot(mod, kind="py_module")
    snap.full_scan()
    built = build_zip(snap, tmp_path / "out")
    with zipfile.ZipFile(built.path) as zf:
        assert zf.namelist() == ["mylib/__init__.py"]
    verify_package(built.path.name, built.path)


def test_file_changed_after_hashing_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("one\n")
    snap = Snapshot(src)
    snap.full_scan()
    (src / "a.py").write_text("two\n")  # the snapshot has not seen this
    with pytest.raises(ContentChanged):
        build_zip(snap, tmp_path / "out")
    assert not list((tmp_path / "out").glob("_ray_pkg_*"))


def _tree(tmp_path: Path) -> tuple[Path, Snapshot]:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for i in range(6):
        (src / "d" / f"f{i}.txt").write_bytes(os.urandom(50) * 20)
    snap = Snapshot(src)
    snap.full_scan()
    return src, snap


def test_a_mode_change_is_not_reused(tmp_path: Path) -> None:
    src, snap = _tree(tmp_path)
    first = build_zip(snap, tmp_path / "out")
    (src / "d" / "f2.txt").chmod(0o755)  # same content, same Ray digest, another mode
    snap.update([str(src / "d" / "f2.txt")])
    second = build_zip(snap, tmp_path / "out", first)
    assert (second.reused, second.compressed) == (5, 1)
    with zipfile.ZipFile(second.path) as zf:
        assert zf.getinfo("d/f2.txt").external_attr >> 16 & 0o777 == 0o755
    assert second.path.read_bytes() == build_zip(snap, tmp_path / "fresh").path.read_bytes()


def test_a_zip_that_cannot_splice_is_written_afresh(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.packaging import zipreuse

    src, snap = _tree(tmp_path)
    first = build_zip(snap, tmp_path / "out")
    (src / "d" / "f1.txt").write_text("changed\n")
    snap.update([str(src / "d" / "f1.txt")])
    monkeypatch.setattr(zipreuse, "_ZIP64_OFFSET", 100)  # "2 GiB" is 100 bytes now
    second = build_zip(snap, tmp_path / "out", first)
    assert (second.reused, second.compressed) == (0, 6)
    assert second.path.read_bytes() == build_zip(snap, tmp_path / "fresh").path.read_bytes()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        {first.path.name, second.path.name})


def test_an_ignored_folder_is_hashed_not_zipped_and_the_zip_is_pushs(tmp_path: Path) -> None:
    """`push --watch` zipped an empty `data/` for a folder whose files are all ignored (Ray's
    zip has none): now its zip is byte for byte the one `rtenv push` builds."""
    from rtenv_cli.core.packaging.build import build_package

    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "data" / "x").write_text("x\n")
    (src / "keep").mkdir()
    (src / "main.py").write_text("print(1)\n" * 50)
    (src / ".gitignore").write_text("/data/\n")
    snap = Snapshot(src)
    snap.full_scan()
    built = build_zip(snap, tmp_path / "out")
    with zipfile.ZipFile(built.path) as zf:
        assert sorted(zf.namelist()) == [".gitignore", "keep/", "main.py"]
    pushed = build_package(src, kind="working_dir", env={}, dest_dir=tmp_path / "push",
                           use_cache=False)
    assert pushed.uri == built.uri
    assert pushed.hashed_dirs == ("data",)
    assert built.path.read_bytes() == pushed.path.read_bytes()
    remote = build_zip(snap, tmp_path / "remote", layout="remote")
    assert remote.path.read_bytes() == build_package(
        src, kind="working_dir", env={}, dest_dir=tmp_path / "push-remote", layout="remote",
        use_cache=False).path.read_bytes()
    manifest = {e["path"]: e for e in snap.manifest()["entries"]}
    assert manifest["data"]["in_zip"] is False
    assert manifest["keep"]["in_zip"] is True


def test_over_the_targets_limit_push_and_watch_deflate_alike(tmp_path: Path) -> None:
    """Members are stored, as Ray stores them, unless the stored package would not fit the
    target's upload limit: then push and watch both deflate what shrinks, to the same bytes."""
    from rtenv_cli.core.push import push
    from rtenv_cli.core.transport.file_target import FileTarget

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("print('hello world')\n" * 10_000)  # 210 KB of text
    (src / "rnd.bin").write_bytes(os.urandom(20_000))
    target = FileTarget((tmp_path / "shared").as_uri())
    target.max_upload_bytes = 100_000
    result = push(src, target=target)
    published = target._dest(result.packages[0].ray_uri).read_bytes()
    assert len(published) < 100_000
    with zipfile.ZipFile(io.BytesIO(published)) as zf:
        methods = {i.filename: i.compress_type for i in zf.infolist()}
    assert methods == {"pkg/a.py": zipfile.ZIP_DEFLATED, "pkg/rnd.bin": zipfile.ZIP_STORED}
    snap = Snapshot(src)
    snap.full_scan()
    watched = build_zip(snap, tmp_path / "watch", layout="remote", limit=100_000)
    assert watched.path.read_bytes() == published
    roomy = build_zip(snap, tmp_path / "roomy", layout="remote", limit=10**9)
    with zipfile.ZipFile(roomy.path) as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    assert roomy.uri == watched.uri

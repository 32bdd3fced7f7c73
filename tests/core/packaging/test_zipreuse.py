"""zipreuse: reading a central directory without zipfile objects, and splicing members."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from rtenv_cli.core.packaging import zipreuse
from rtenv_cli.core.packaging.build import build_package
from rtenv_cli.core.packaging.zipreuse import Unspliceable, ZipIndex, splice


def _zip(path: Path, members: dict[str, bytes], **kw: object) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, **kw) as zf:  # type: ignore[arg-type]
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_index_matches_zipfile(tmp_path: Path) -> None:
    z = _zip(tmp_path / "a.zip", {"a.txt": b"a" * 1000, "d/": b"", "é/ü.py": os.urandom(300)})
    index = ZipIndex.read(z)
    assert index is not None
    index.close()
    with zipfile.ZipFile(z) as zf:
        infos = zf.infolist()
        assert list(index.members) == [i.filename for i in infos]
        for i, nxt in zip(infos, [*infos[1:], None], strict=True):
            m = index.members[i.filename]
            assert m.start == i.header_offset
            assert m.end == (nxt.header_offset if nxt else zf.start_dir)


def test_a_known_index_is_taken_only_for_the_central_directory_it_was_read_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    z = _zip(tmp_path / "a.zip", {"a.txt": b"a" * 1000, "b.txt": b"bee"})
    first = ZipIndex.read(z)
    assert first is not None
    first.close()
    known = first.known

    def no_parse(*_a: object) -> None:
        raise AssertionError("parsed although the known index applies")

    with monkeypatch.context() as m:
        m.setattr(ZipIndex, "_parse", staticmethod(no_parse))
        again = ZipIndex.read(z, known)
        assert again is not None
        again.close()
    assert again.members == first.members
    # the zip changed under the same name: its own central directory is read
    _zip(z, {"a.txt": b"a" * 1000, "b.txt": b"a longer bee"})
    changed = ZipIndex.read(z, known)
    assert changed is not None
    changed.close()
    assert changed.cd_digest != first.cd_digest
    with zipfile.ZipFile(z) as zf:
        assert changed.members["b.txt"].end == zf.start_dir
    for junk in [(changed.cd_digest, {"a.txt": (1,), "b.txt": (2,)}), (changed.cd_digest,),
                 "junk"]:
        index = ZipIndex.read(z, junk)  # type: ignore[arg-type]
        assert index is not None
        index.close()
        assert index.members == changed.members


@pytest.mark.parametrize("damage", ["comment", "truncated", "not a zip", "empty"])
def test_index_refuses_what_it_cannot_splice(tmp_path: Path, damage: str) -> None:
    z = _zip(tmp_path / "a.zip", {"a.txt": b"abc", "b.txt": b"def"})
    if damage == "comment":
        with zipfile.ZipFile(z, "a") as zf:
            zf.comment = b"hello"
    elif damage == "truncated":
        z.write_bytes(z.read_bytes()[:-30])
    elif damage == "not a zip":
        z.write_bytes(b"x" * 100)
    else:
        z.write_bytes(b"")
    assert ZipIndex.read(z) is None


def test_splice_takes_members_from_two_zips_in_any_order(tmp_path: Path) -> None:
    a = _zip(tmp_path / "a.zip", {"1": b"one" * 100, "2": b"two", "3": os.urandom(5000)})
    b = _zip(tmp_path / "b.zip", {"x/": b"", "y": b"why" * 50})
    ia, ib = ZipIndex.read(a), ZipIndex.read(b)
    assert ia is not None
    assert ib is not None
    out = tmp_path / "out.zip"
    size, known = splice(out, [(ia, "1"), (ib, "y"), (ia, "2"), (ia, "3"), (ib, "x/")])
    assert size == out.stat().st_size
    again = ZipIndex.read(out)  # the index splice returns is what reading the zip gives
    assert again is not None
    again.close()
    assert known == again.known
    with zipfile.ZipFile(out) as zf, zipfile.ZipFile(a) as za, zipfile.ZipFile(b) as zb:
        assert zf.testzip() is None
        assert zf.namelist() == ["1", "y", "2", "3", "x/"]
        assert zf.read("3") == za.read("3")
        assert zf.read("y") == zb.read("y")
    # a splice of one whole zip in its own order is that zip, byte for byte
    splice(tmp_path / "same.zip", [(ia, n) for n in ["1", "2", "3"]])
    assert (tmp_path / "same.zip").read_bytes() == a.read_bytes()
    # the index reads the file it opened: a zip replaced under the same path changes nothing
    a.unlink()
    _zip(a, {"1": b"other"})
    splice(tmp_path / "again.zip", [(ia, n) for n in ["1", "2", "3"]])
    assert (tmp_path / "again.zip").read_bytes() == (tmp_path / "same.zip").read_bytes()
    ia.close()
    ib.close()


def test_splice_refuses_what_needs_zip64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = _zip(tmp_path / "a.zip", {"1": b"1", "2": b"2", "3": b"3"})
    ia = ZipIndex.read(a)
    assert ia is not None
    monkeypatch.setattr(zipreuse, "_MAX_COUNT", 2)
    with pytest.raises(Unspliceable):
        splice(tmp_path / "out.zip", [(ia, n) for n in ["1", "2", "3"]])


def test_a_rebuild_that_cannot_splice_builds_afresh(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.packaging import build

    root = tmp_path / "src"
    root.mkdir()
    for i in range(5):
        (root / f"m{i}.py").write_text(f"X = {i}\n" * 20)
    first = build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "o")
    (root / "m1.py").write_text("X = 'edited'\n")
    entered: list[object] = []
    real = build._rebuild

    def spy(*args: object, **kw: object) -> object:
        entered.append(args)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "_rebuild", spy)
    monkeypatch.setattr(zipreuse, "_ZIP64_OFFSET", 200)  # "2 GiB" is 200 bytes now
    second = build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "o")
    assert len(entered) == 1  # the previous build was found and the splice refused
    assert second.reused == 0
    assert second.uri != first.uri
    cold = build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "c",
                         use_cache=False)
    assert second.path.read_bytes() == cold.path.read_bytes()
    assert not list((tmp_path / "o").glob("._pending*"))  # nothing left from the attempt


def _slot_sidecar(home: Path) -> Path:
    (side,) = (home / "build" / "last").glob("*.state")
    return side


@pytest.mark.parametrize("sidecar", ["another zip", "old format"])
def test_a_sidecar_not_written_for_the_slot_zip_is_ignored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sidecar: str) -> None:
    import marshal

    home = tmp_path / "home"
    monkeypatch.setenv("RTENV_HOME", str(home))
    root = tmp_path / "src"
    root.mkdir()
    for i in range(5):
        (root / f"m{i}.py").write_text(f"X = {i}\n")
    build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "o")
    zipreuse._pending.popitem()[1].join()  # the sidecar is written
    (root / "m1.py").write_text("X = 'edited'\n")
    assert build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "o").reused == 4
    zipreuse._pending.popitem()[1].join()
    side = _slot_sidecar(home)
    version, zip_id, known, stats = marshal.loads(side.read_bytes())  # noqa: S302 - our own file
    # what two processes remembering builds of one source at once can leave: one's sidecar
    # beside the other's zip (or a sidecar of another format)
    side.write_bytes(marshal.dumps((version, (zip_id[0] + 1, zip_id[1]), known, stats)
                                   if sidecar == "another zip" else {"stats": stats}))
    (root / "m2.py").write_text("X = 'again'\n")
    assert build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "o").reused == 0

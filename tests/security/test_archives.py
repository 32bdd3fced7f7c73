"""Archive safety (issue "Prove it" #17, red-team items 1, 2, 12, 13, 16).

Every crafted archive is refused with an ArchiveError (a PackagingError: exit 1, HTTP 422) that
names the member, before anything is written, through `extract`, through `verify_package` and
through the store; nothing appears outside the destination, and nothing is left behind.
"""

from __future__ import annotations

import os
import stat
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from rtenv_cli.core.errors import ExitCode, PackagingError
from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.rayhash import verify_package
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.store.unpack import ArchiveError, Limits, UnsafeArchiveError, extract
from tests.security.crafted import (
    STORED,
    Z,
    build_tar_files,
    build_zip,
    chain,
    link,
    sha1_name,
    tar_info,
    write,
)

UNVERIFIED = "_ray_pkg_0123456789abcdef.zip"  # a Ray hash name the content does not match


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- 1. symlink chains -----------------------------------------------------------------------------
def _chain_members(canary: Path, kind: str) -> list[tuple[str, str, str]]:
    """(name, kind, target or content): the chain, then a member below it at the canary."""
    deep = f"a29{canary}/pwn"  # a29 is 29 levels up: the root, so this names canary/pwn
    last = {"link": (deep, "link", "../../../../../etc/hostname"),
            "file": (deep, "file", "pwned"),
            "dir": (deep + "/", "dir", "")}[kind]
    return [(n, "link", t) for n, t in chain()] + [last]


def _chain_zip(canary: Path, kind: str) -> bytes:
    entries = []
    for name, what, value in _chain_members(canary, kind):
        entries.append(link(name, value) if what == "link" else Z(name, value.encode()))
    return build_zip(entries)


def _chain_tar(canary: Path, kind: str) -> bytes:
    members = []
    for name, what, value in _chain_members(canary, kind):
        if what == "link":
            members.append(tar_info(name, tarfile.SYMTYPE, linkname=value))
        elif what == "dir":
            members.append(tar_info(name.rstrip("/"), tarfile.DIRTYPE, mode=0o755))
        else:
            members.append(tar_info(name, tarfile.REGTYPE, data=value.encode()))
    return build_tar_files(members)


CHAINS = {"zip": (_chain_zip, ".zip"), "tar": (_chain_tar, ".tar.gz")}


@pytest.mark.parametrize("fmt", CHAINS)
@pytest.mark.parametrize("kind", ["link", "file", "dir"])
def test_symlink_chain_writes_nothing_outside(tmp_path: Path, fmt: str, kind: str) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    build, ext = CHAINS[fmt]
    archive = write(tmp_path / f"chain{ext}", build(canary, kind))
    with pytest.raises(UnsafeArchiveError, match="a29"):
        extract(archive, tmp_path / "work" / "out")
    assert _listing(canary) == []
    assert not (tmp_path / "work" / "out").exists()


@pytest.mark.parametrize("fmt", CHAINS)
def test_symlink_chain_through_the_store_writes_nothing_outside(tmp_path: Path, fmt: str) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    build, ext = CHAINS[fmt]
    store = Store(tmp_path / "store")
    name = f"chain{ext}"  # a free name: the store keeps it unverified, as Ray's GCS would
    store.put_package(name, write(tmp_path / name, build(canary, "link")))
    with pytest.raises(PackagingError, match="a29") as err:
        Environments(store).get_or_create({"working_dir": f"gcs://{name}"}, holder="h")
    assert err.value.exit_code == ExitCode.FAILURE
    assert _listing(canary) == []
    assert list((store.root / "entries").iterdir()) == []
    assert list((store.root / "tmp").iterdir()) == []


def test_symlink_chain_under_a_ray_name_is_refused_at_upload(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    canary.mkdir()
    archive = write(tmp_path / UNVERIFIED, _chain_zip(canary, "link"))
    with pytest.raises(UnsafeArchiveError, match="a29"):
        verify_package(UNVERIFIED, archive)


def test_links_that_stay_inside_still_extract(tmp_path: Path) -> None:
    archive = write(tmp_path / "ok.zip", build_zip([
        Z("sub/a.txt", b"a"), link("lib", "sub"), link("b", "lib/a.txt"), link("c", "b"),
        link("sub/up", "../sub/a.txt"), link("dangling", "nowhere/../sub"),
    ]))
    extract(archive, tmp_path / "out")
    out = tmp_path / "out"
    assert (out / "c").read_text() == "a"
    assert (out / "sub/up").read_text() == "a"
    assert os.readlink(out / "lib") == "sub"


@pytest.mark.parametrize(("links", "needle"), [
    ({"l": "d/x/../../.."}, "escapes"),  # lexically inside only if d/x were plain directories
    ({"d": ".", "l": "d/.."}, "escapes"),
    ({"x": "y", "y": "x"}, "more than 40"),
    ({"l": "/etc"}, "outside"),
])
def test_link_targets_are_resolved_through_the_archives_links(
        tmp_path: Path, links: dict[str, str], needle: str) -> None:
    entries = [Z("f.txt", b"x")] + [link(n, t) for n, t in links.items()]
    if "d" not in links:
        entries.append(link("d", "."))
    archive = write(tmp_path / "l.zip", build_zip(entries))
    with pytest.raises(UnsafeArchiveError, match=needle):
        extract(archive, tmp_path / "out")


def test_member_below_a_link_of_the_archive_is_refused(tmp_path: Path) -> None:
    archive = write(tmp_path / "l.zip", build_zip([Z("real/f", b"x"), link("l", "real"),
                                                   Z("l/g", b"y")]))
    with pytest.raises(UnsafeArchiveError, match="below the symlink 'l'"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "real").exists()


# -- 2. corrupt and unusual archives ---------------------------------------------------------------
ZIP_CASES: dict[str, tuple[Callable[[], bytes], str]] = {
    "bad_crc": (lambda: build_zip([Z("a.txt", b"hello", crc=1)]), "'a.txt' is corrupt"),
    "corrupt_deflate": (lambda: build_zip([Z("a.txt", b"hello", payload=b"\xff" * 8)]),
                        "'a.txt' is corrupt"),
    "method_99": (lambda: build_zip([Z("a.txt", b"x", method=99, payload=b"x")]),
                  "'a.txt' uses compression method 99"),
    "deflate64": (lambda: build_zip([Z("a.txt", b"x", method=9, payload=b"x")]),
                  "'a.txt' uses compression method 9"),
    "encrypted": (lambda: build_zip([Z("a.txt", b"x", flags=1)]), "'a.txt' is encrypted"),
    "size_smaller_than_data": (lambda: build_zip([Z("a.txt", b"hello world", file_size=3)]),
                               "'a.txt'"),
    "size_larger_than_data": (lambda: build_zip([Z("a.txt", b"hi", file_size=100)]),
                              "'a.txt' holds 2 bytes"),
    "stored_size_lies": (lambda: build_zip([Z("a.txt", b"hi", method=STORED, file_size=100),
                                            Z("b.txt", b"b")]), "'a.txt'"),
    "utf8_flag_invalid_bytes": (lambda: build_zip([Z(b"\xff\xfe.txt", b"x", flags=0x800)]),
                                r"b'\\xff\\xfe.txt' is flagged UTF-8"),
    "non_utf8_name_no_flag": (lambda: build_zip([Z(b"caf\xe9.txt", b"x", flags=0)]),
                              r"b'caf\\xe9.txt' is not UTF-8"),
    "nul_in_name": (lambda: build_zip([Z(b"a\x00b", b"x")]), "NUL"),
    "component_over_255": (lambda: build_zip([Z("d/" + "x" * 256, b"x")]), "over 255 bytes"),
    "path_over_4096": (lambda: build_zip([Z("/".join(["d" * 200] * 21), b"x")]),
                       "over the limit of 4096"),
    "empty_name": (lambda: build_zip([Z("", b"x")]), "unsafe member name ''"),
    "dot": (lambda: build_zip([Z(".", b"x")]), "'.' names the root"),
    "file_then_dir": (lambda: build_zip([Z("a", b"x"), Z("a/", b"")]), "'a' appears twice"),
    "file_then_link": (lambda: build_zip([Z("a", b"x"), link("a", "b")]), "'a' appears twice"),
    "file_then_file": (lambda: build_zip([Z("a", b"x"), Z("a", b"y")]), "'a' appears twice"),
    "file_then_child": (lambda: build_zip([Z("a", b"x"), Z("a/b", b"y")]),
                        "'a/b' lies below the file 'a'"),
    "shared_local_header": (lambda: build_zip([Z("z", os.urandom(1 << 16))], central=[0] * 5),
                            "entry 'z' overlaps"),
    "not_a_zip": (lambda: b"PK\x03\x04" + b"\0" * 100, "not a readable zip"),
}


@pytest.mark.parametrize("case", ZIP_CASES)
def test_corrupt_zip_through_extract(tmp_path: Path, case: str) -> None:
    build, needle = ZIP_CASES[case]
    archive = write(tmp_path / "bad.zip", build())
    with pytest.raises(ArchiveError, match=needle) as err:
        extract(archive, tmp_path / "out")
    assert err.value.exit_code == ExitCode.FAILURE
    assert err.value.http_status == 422  # the agent answers 422
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", ZIP_CASES)
def test_corrupt_zip_through_verify_package(tmp_path: Path, case: str) -> None:
    build, needle = ZIP_CASES[case]
    archive = write(tmp_path / UNVERIFIED, build())
    with pytest.raises(ArchiveError, match=needle):
        verify_package(UNVERIFIED, archive)


@pytest.mark.parametrize("case", ["bad_crc", "size_larger_than_data", "file_then_dir",
                                  "shared_local_header"])
def test_corrupt_zip_through_the_store_leaves_nothing(tmp_path: Path, case: str) -> None:
    build, needle = ZIP_CASES[case]
    store = Store(tmp_path / "store")
    with pytest.raises(ArchiveError, match=needle):
        store.put_package(UNVERIFIED, write(tmp_path / "in.zip", build()))
    assert not store.has_package(UNVERIFIED)
    assert list((store.root / "tmp").iterdir()) == []
    store.put_package("free.zip", tmp_path / "in.zip")  # free names are kept unverified...
    with pytest.raises(ArchiveError, match=needle):  # ...and refused when unpacked
        Environments(store).get_or_create({"working_dir": "gcs://free.zip"}, holder="h")
    assert list((store.root / "entries").iterdir()) == []
    assert list((store.root / "tmp").iterdir()) == []


TAR_CASES: dict[str, tuple[Callable[[], bytes], str]] = {
    "fifo": (lambda: build_tar_files([tar_info("p", tarfile.FIFOTYPE)]), "'p' is a device, FIFO"),
    "char_device": (lambda: build_tar_files([tar_info("tty", tarfile.CHRTYPE)]),
                    "'tty' is a device"),
    "hard_link_out": (lambda: build_tar_files([tar_info("h", tarfile.LNKTYPE,
                                                        linkname="../../etc/passwd")]),
                      "'h' is a hard link"),
    "hard_link_in": (lambda: build_tar_files([tar_info("a", tarfile.REGTYPE, data=b"x"),
                                              tar_info("h", tarfile.LNKTYPE, linkname="a")]),
                     "'h' is a hard link"),
    "non_utf8_name": (lambda: build_tar_files([tar_info("caf\udce9", tarfile.REGTYPE,
                                                        data=b"x")]), "is not UTF-8"),
    "file_then_dir": (lambda: build_tar_files([tar_info("a", tarfile.REGTYPE, data=b"x"),
                                               tar_info("a", tarfile.DIRTYPE)]),
                      "'a' appears twice"),
    "dot_file": (lambda: build_tar_files([tar_info(".", tarfile.REGTYPE, data=b"x")]),
                 "'.' names the root"),
    "empty_name": (lambda: build_tar_files([tar_info("", tarfile.REGTYPE, data=b"x")]),
                   "unsafe member name ''"),
    "truncated": (lambda: build_tar_files([tar_info("a", tarfile.REGTYPE,
                                                    data=os.urandom(50_000))])[:20_000],
                  "corrupt|not a readable"),
}


@pytest.mark.parametrize("case", TAR_CASES)
def test_unusual_tar_through_extract_and_verify(tmp_path: Path, case: str) -> None:
    build, needle = TAR_CASES[case]
    data = build()
    archive = write(tmp_path / "bad.tar.gz", data)
    with pytest.raises(ArchiveError, match=needle):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    name = sha1_name(data, ".tar.gz")  # named after its bytes: only the tree check can refuse
    with pytest.raises(ArchiveError, match=needle):
        verify_package(name, write(tmp_path / name, data))


# -- 3. limits -------------------------------------------------------------------------------------
def test_many_small_members_count_toward_the_ratio(tmp_path: Path) -> None:
    one_mib = b"\0" * (1 << 20)  # each at the per-member threshold, so only the sum can tell
    archive = write(tmp_path / "many.zip", build_zip([Z(f"f{i}", one_mib) for i in range(50)]))
    assert archive.stat().st_size < (1 << 20)
    with pytest.raises(UnsafeArchiveError, match="decompression bomb"):
        extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UnsafeArchiveError, match="decompression bomb"):
        verify_package(UNVERIFIED, write(tmp_path / UNVERIFIED, archive.read_bytes()))
    tgz = write(tmp_path / "many.tar.gz", build_tar_files(
        [tar_info(f"f{i}", tarfile.REGTYPE, data=one_mib) for i in range(50)]))
    with pytest.raises(UnsafeArchiveError, match="decompression bomb"):
        extract(tgz, tmp_path / "out")


def test_verification_cpu_bomb_is_refused_before_inflating(tmp_path: Path) -> None:
    # red-team item 12: one 64 MiB zero member listed 200 times in the central directory
    data = build_zip([Z("zeros", b"\0" * (64 << 20))], central=[0] * 200)
    assert len(data) < 100_000
    archive = write(tmp_path / UNVERIFIED, data)
    with pytest.raises(UnsafeArchiveError, match="decompression bomb"):
        verify_package(UNVERIFIED, archive)
    # 200 listings of a member under every ratio and size limit: only the shared offset
    # gives it away (460 MB to inflate from a 600 KB upload)
    text = b"".join(b"%08d " % i for i in range(2 << 17))
    listed = build_zip([Z("text", text)], central=[0] * 200)
    with pytest.raises(UnsafeArchiveError, match="entry 'text' overlaps"):
        verify_package(UNVERIFIED, write(tmp_path / UNVERIFIED, listed))


@pytest.mark.parametrize("fmt", ["zip", "tar"])
def test_member_limit(tmp_path: Path, fmt: str) -> None:
    files = {f"f{i}": b"x" for i in range(6)}
    if fmt == "zip":
        archive = write(tmp_path / "m.zip", build_zip([Z(n, d) for n, d in files.items()]))
    else:
        archive = write(tmp_path / "m.tar.gz", build_tar_files(
            [tar_info(n, tarfile.REGTYPE, data=d) for n, d in files.items()]))
    with pytest.raises(ArchiveError, match="over the limit"):
        extract(archive, tmp_path / "out", limits=Limits(max_members=5))
    extract(archive, tmp_path / "ok", limits=Limits(max_members=6))
    assert len(list((tmp_path / "ok").iterdir())) == 6


def test_path_length_limit(tmp_path: Path) -> None:
    archive = write(tmp_path / "p.zip", build_zip([Z("d/" + "x" * 98, b"x")]))
    with pytest.raises(ArchiveError, match="over the limit of 99"):
        extract(archive, tmp_path / "out", limits=Limits(max_path_bytes=99))
    extract(archive, tmp_path / "ok", limits=Limits(max_path_bytes=100))


def test_a_hundred_thousand_tiny_members_extract_and_verify(tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "many.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(100_000):
            zf.writestr(f"d{i % 100}/f{i}", b"")
    with pytest.raises(ArchiveError, match="100000 members, over the limit of 70000"):
        extract(archive, tmp_path / "refused", limits=Limits(max_members=70_000))  # zip64 count
    assert extract(archive, tmp_path / "out") == 0
    assert len(list((tmp_path / "out" / "d7").iterdir())) == 1000
    with pytest.raises(PackagingError, match="does not match"):  # checked in full, then hashed
        verify_package(UNVERIFIED, archive)


# -- 4. modes --------------------------------------------------------------------------------------
MODES = {"setuid": (0o4755, 0o755), "setgid": (0o2755, 0o755), "sticky_world": (0o1777, 0o755),
         "world_writable": (0o777, 0o755), "group_write": (0o664, 0o644),
         "private": (0o600, 0o644), "owner_exec": (0o700, 0o755), "none": (0o000, 0o644)}


def _modes(root: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.lstat().st_mode) for p in root.rglob("*")}


def test_zip_modes_are_masked(tmp_path: Path) -> None:
    entries = [Z(f"d/{name}", b"#!/bin/sh\n", mode=stat.S_IFREG | mode)
               for name, (mode, _) in MODES.items()]
    entries.append(Z("d/", mode=stat.S_IFDIR | 0o7777))
    extract(write(tmp_path / "m.zip", build_zip(entries)), tmp_path / "out")
    got = _modes(tmp_path / "out")
    want = {name: masked for name, (_, masked) in MODES.items()}
    assert got == {**want, "d": 0o755}


def test_tar_modes_are_masked(tmp_path: Path) -> None:
    members = [tar_info("d", tarfile.DIRTYPE, mode=0o1777)]
    members += [tar_info(f"d/{name}", tarfile.REGTYPE, mode=mode, data=b"x")
                for name, (mode, _) in MODES.items()]
    extract(write(tmp_path / "m.tar.gz", build_tar_files(members)), tmp_path / "out")
    want = {name: masked for name, (_, masked) in MODES.items()}
    assert _modes(tmp_path / "out") == {**want, "d": 0o755}


# -- 6. directories Ray hashes but does not zip ----------------------------------------------------
def test_extra_dirs_are_folded_into_the_hash(tmp_path: Path) -> None:
    from rtenv_cli.core.packaging.build import build_package

    src = tmp_path / "wd"
    (src / "data").mkdir(parents=True)
    (src / "data" / "x").write_text("excluded")
    (src / ".gitignore").write_text("/data/\n")  # matches data/x, not the directory's own path
    (src / "main.py").write_text("print(1)\n")
    built = build_package(src, kind="working_dir", dest_dir=tmp_path / "out", use_cache=False)
    name = built.uri.removeprefix("gcs://")
    verify_package(name, built.path, extra_dirs=["data"])
    with pytest.raises(PackagingError, match="does not match"):
        verify_package(name, built.path)
    too_many = [f"d{i}" for i in range(Limits().max_members + 1)]
    with pytest.raises(ArchiveError, match="more than 200000 extra directories"):
        verify_package(name, built.path, extra_dirs=too_many)
    for bad in ["../x", "/abs", "a/../b", "", "."]:
        with pytest.raises(ArchiveError):
            verify_package(name, built.path, extra_dirs=[bad])


# -- the same through a real agent process -------------------------------------------------------
def test_agent_answers_422_and_writes_nothing_outside(tmp_path: Path) -> None:
    import requests

    from tests.support.agent import agent_process

    canary = tmp_path / "canary"
    canary.mkdir()
    chain_zip = _chain_zip(canary, "link")
    bomb = build_zip([Z("zeros", b"\0" * (64 << 20))], central=[0] * 200)
    with agent_process(tmp_path / "agent-store") as agent:
        put = requests.put(f"{agent.url}/api/packages/gcs/{UNVERIFIED}", data=bomb, timeout=60)
        assert put.status_code == 422
        assert "decompression bomb" in put.json()["error"]["message"]
        put = requests.put(f"{agent.url}/api/packages/gcs/chain.zip", data=chain_zip, timeout=60)
        assert put.status_code == 200  # a free name: stored unverified, like Ray's GCS
        made = requests.post(f"{agent.url}/api/envs", timeout=60, json={
            "runtime_env": {"working_dir": "gcs://chain.zip"}, "holder": "h"})
        assert made.status_code == 422
        assert "a29" in made.json()["error"]["message"]
        setuid = build_zip([Z("id", b"\x7fELF", mode=0o104755)])
        requests.put(f"{agent.url}/api/packages/gcs/setuid.zip", data=setuid, timeout=60)
        env = requests.post(f"{agent.url}/api/envs", timeout=60, json={
            "runtime_env": {"working_dir": "gcs://setuid.zip"}, "holder": "h"})
        assert env.status_code == 200
        [entry] = [p for p in (agent.root / "entries").rglob("id")]
        assert stat.S_IMODE(entry.stat().st_mode) == 0o755
    assert _listing(canary) == []


def test_rtenv_run_with_crafted_local_zips(tmp_path: Path) -> None:
    from tests.support.cli import run_process

    canary = tmp_path / "canary"
    canary.mkdir()
    write(tmp_path / "chain.zip", _chain_zip(canary, "link"))
    (tmp_path / "chain.yaml").write_text(f"working_dir: {tmp_path / 'chain.zip'}\n")
    res = run_process(["run", "-r", str(tmp_path / "chain.yaml"), "--", "true"])
    assert res.exit_code == 1, res.stderr
    assert "a29" in res.stderr
    assert "internal error" not in res.stderr
    assert _listing(canary) == []
    write(tmp_path / "crc.zip", ZIP_CASES["bad_crc"][0]())
    (tmp_path / "crc.yaml").write_text(f"working_dir: {tmp_path / 'crc.zip'}\n")
    res = run_process(["run", "-r", str(tmp_path / "crc.yaml"), "--", "true"])
    assert res.exit_code == 1, res.stderr
    assert "'a.txt' is corrupt" in res.stderr
    write(tmp_path / "suid.zip", build_zip([Z("tool", b"#!/bin/sh\n", mode=0o104755),
                                            Z("open", b"x", mode=0o100666)]))
    (tmp_path / "suid.yaml").write_text(f"working_dir: {tmp_path / 'suid.zip'}\n")
    show = "import os; print(*(oct(os.stat(n).st_mode & 0o7777) for n in ('tool', 'open')))"
    res = run_process(["run", "-r", str(tmp_path / "suid.yaml"), "--", sys.executable, "-c",
                       show])
    assert res.exit_code == 0, res.stderr
    assert res.stdout.split() == ["0o755", "0o644"]

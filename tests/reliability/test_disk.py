"""Disk accounting and a full disk: the index counts what is on disk; ENOSPC is DiskFullError.

The full-disk tests run the store on a small tmpfs mounted for the test (they are skipped only
where mounting is refused, e.g. without CAP_SYS_ADMIN).
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtenv_cli.core.errors import DiskFullError
from rtenv_cli.core.store import delta
from rtenv_cli.core.store.store import Store
from tests.support.packages import make_tree, ray_package


def _du(paths: list[Path]) -> int:
    return sum(p.stat().st_blocks * 512 for p in paths if p.is_file())


def test_a_delta_package_is_counted_as_what_it_takes_on_disk(tmp_path: Path) -> None:
    files = {f"m{i}.bin": os.urandom(300_000).hex() for i in range(4)}
    src = make_tree(tmp_path / "src", files)
    uri, _zip = ray_package(src, tmp_path)
    name = uri.removeprefix("gcs://")
    store = Store(tmp_path / "store")
    entries = []
    for rel in sorted(files):
        data = (src / rel).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        store.put_blob(sha, io.BytesIO(data))
        entries.append({"path": rel, "is_dir": False, "mode": 0o644, "size": len(data),
                        "sha256": sha})
    delta.commit(store, delta.Manifest.parse({"uri": uri, "kind": "working_dir",
                                              "entries": entries}))

    def counted() -> int:
        return sum(e.size_bytes for e in store.index.all())

    def on_disk() -> int:
        return _du([p for sub in ("packages", "manifests", "blobs")
                    for p in (store.root / sub).rglob("*")])

    assert counted() == on_disk()  # blobs + manifest
    store.package_file(name)  # the zip Ray's nodes read, assembled once
    assert counted() == on_disk()
    store.remote_file(name)  # and the copy for remote nodes
    assert counted() == on_disk()
    assert on_disk() > 2 * sum(len(t) for t in files.values())  # blobs, zip and copy: all counted


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a disk that fills up."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _incompressible(n: int) -> bytes:
    return os.urandom(n)


def test_full_disk_on_a_blob_upload_is_disk_full_and_leaves_nothing(small_disk: Path) -> None:
    store = Store(small_disk / "store")
    data = _incompressible(6 << 20)
    with pytest.raises(DiskFullError) as info:
        store.put_blob(hashlib.sha256(data).hexdigest(), io.BytesIO(data))
    assert str(store.root) in (info.value.hint or "")
    assert "--max-size" in (info.value.hint or "")
    assert "requirements" not in (info.value.hint or "")
    assert list((store.root / "tmp").iterdir()) == []
    small = b"fits"  # and the store goes on once there is room
    store.put_blob(hashlib.sha256(small).hexdigest(), io.BytesIO(small))


def test_full_disk_during_a_build_is_disk_full(small_disk: Path) -> None:
    store = Store(small_disk / "store")

    def build(tree: Path) -> None:
        (tree / "big").write_bytes(_incompressible(6 << 20))

    with pytest.raises(DiskFullError) as info:
        store.get_or_build("uv:big", kind="uv", uri="uv://big", label="big", build=build)
    assert "no space left" in info.value.message
    assert list((store.root / "tmp").iterdir()) == []
    assert store.index.get("uv:big") is None


def test_full_disk_on_a_package_upload_is_disk_full(small_disk: Path, tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src", {"big.txt": _incompressible(3 << 20).hex()})
    uri, pkg = ray_package(src, tmp_path)
    store = Store(small_disk / "store")
    with pytest.raises(DiskFullError):
        store.put_package(uri.removeprefix("gcs://"), pkg)
    assert not store.has_package(uri.removeprefix("gcs://"))
    assert list((store.root / "tmp").iterdir()) == []


def test_a_blob_batch_is_written_once_not_spooled_then_copied(small_disk: Path) -> None:
    """A batch of 2.6 MiB to an agent on a 4 MiB disk: it fits once, not twice."""
    import requests

    from tests.support.agent import agent_process

    blobs = [_incompressible(650_000) for _ in range(4)]
    body = b"".join(f"{hashlib.sha256(b).hexdigest()} {len(b)}\n".encode() + b for b in blobs)
    with agent_process(small_disk / "store") as agent:
        resp = requests.post(f"{agent.url}/api/blobs", data=body, timeout=60)
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"stored": 4}
        root = small_disk / "store"
        for b in blobs:
            sha = hashlib.sha256(b).hexdigest()
            assert (root / "blobs" / sha[:2] / sha).read_bytes() == b
        assert list((root / "tmp").iterdir()) == []


def test_a_venv_build_on_a_full_disk_is_disk_full_not_bad_requirements(small_disk: Path
                                                                       ) -> None:
    from rtenv_cli.core.store.envs import Environments

    store = Store(small_disk / "store")
    st = os.statvfs(small_disk)
    (small_disk / "filler").write_bytes(b"x" * (st.f_bavail * st.f_frsize - 60_000))
    with pytest.raises(DiskFullError) as info:
        Environments(store).get_or_create({"pip": ["six==1.16.0"]}, holder="h")
    assert "requirements" not in (info.value.hint or "")
    assert list((store.root / "tmp").iterdir()) == []


def test_an_upload_bigger_than_the_free_space_gets_a_disk_full_reply(small_disk: Path,
                                                                     tmp_path: Path) -> None:
    """Not a connection reset nor a bare 500: the agent reads the rest of the body and says
    what happened (the status is the HTTP layer's business)."""
    import requests

    from tests.support.agent import agent_process

    src = make_tree(tmp_path / "src", {"big.txt": _incompressible(3 << 20).hex()})
    uri, pkg = ray_package(src, tmp_path)
    with agent_process(small_disk / "store") as agent:
        resp = requests.put(f"{agent.url}/api/packages/gcs/{uri.removeprefix('gcs://')}",
                            data=pkg.read_bytes(), timeout=60)
        assert resp.status_code == 507  # Insufficient Storage: the server's condition
        error = resp.json()["error"]
        assert error["code"] == "disk-full"
        assert str(small_disk / "store") in error["hint"]
        assert list((small_disk / "store" / "tmp").iterdir()) == []

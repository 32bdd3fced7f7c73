"""gc and purge racing pushes and creates: an upload is pinned until the create that follows it.

The purges are the code `rtenv cache purge --yes` runs (`LocalBackend.gc`), on their own Store
of the same root, in a thread; the pushes and creates are `rtenv run`'s (`publish_local`, then
`Environments.get_or_create`) on the embedded store.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest

from rtenv_cli.core.cache.backends import LocalBackend
from rtenv_cli.core.errors import RtenvError
from rtenv_cli.core.run import publish_local
from rtenv_cli.core.store import delta
from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport.local_store import LocalStoreTarget


class _PurgeLoop:
    """`rtenv cache purge --yes` on `root`, over and over, in a thread, until stopped."""

    def __init__(self, root: Path) -> None:
        self.backend = LocalBackend(root)
        self.stop = threading.Event()
        self.removed: list[str] = []
        self.errors: list[BaseException] = []
        self.rounds = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                result = self.backend.gc(dry_run=False, purge=True)
            except BaseException as exc:  # reported by the test
                self.errors.append(exc)
                return
            self.removed += [e.key for e in result.removed]
            self.rounds += 1

    def __enter__(self) -> _PurgeLoop:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


def test_run_never_loses_its_package_to_a_racing_purge(tmp_path: Path) -> None:
    target = LocalStoreTarget(tmp_path / "store")
    envs = Environments(target.store)
    failures: list[str] = []
    with _PurgeLoop(target.store.root) as purge:
        for i in range(30):
            src = tmp_path / f"src{i % 10}"  # ten trees: later rounds find theirs uploaded
            src.mkdir(exist_ok=True)
            (src / "main.py").write_text(f"ROUND = {i % 10}\n")
            try:
                runtime_env = publish_local({"working_dir": src.name}, tmp_path, target)
                handle = envs.get_or_create(runtime_env, holder=f"run:{i}", pid=os.getpid())
            except RtenvError as exc:
                failures.append(f"round {i}: {exc}")
                continue
            assert handle.working_dir is not None
            assert (Path(handle.working_dir) / "main.py").read_text() == f"ROUND = {i % 10}\n"
            envs.release(handle.key, f"run:{i}")
    assert purge.errors == []
    assert failures == []
    assert purge.rounds > 30  # the purges really ran between the steps
    assert any(k.startswith("working_dir:") for k in purge.removed)  # and did remove things


def _blob_files(tmp_path: Path, n: int) -> list[tuple[str, Path]]:
    out = []
    for i in range(n):
        path = tmp_path / f"blob{i}"
        data = f"blob number {i}\n".encode() * 50
        path.write_bytes(data)
        out.append((hashlib.sha256(data).hexdigest(), path))
    return out


def test_blobs_uploaded_before_their_commit_survive_a_purge(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    blobs = _blob_files(tmp_path, 5)
    store.put_blob_files(blobs)
    result = LocalBackend(store.root).gc(dry_run=False, purge=True)
    assert result.removed == ()
    assert all(store.blob_path(sha).exists() for sha, _ in blobs)


def test_blobs_the_store_already_has_are_pinned_when_reported(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    root = tmp_path / "store"
    monkeypatch.setenv("RTENV_UPLOAD_PIN_S", "0")
    old = Store(root)
    blobs = _blob_files(tmp_path, 3)
    old.put_blob_files(blobs)  # an earlier push's blobs, unpinned (pin 0)
    monkeypatch.delenv("RTENV_UPLOAD_PIN_S")
    store = Store(root)
    shas = [sha for sha, _ in blobs]
    assert store.has_blobs(shas) == set(shas)  # what `missing` tells the client: not sent again
    LocalBackend(root).gc(dry_run=False, purge=True)
    assert all(store.blob_path(sha).exists() for sha in shas)


def test_delta_push_then_create_with_a_purge_in_between(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("A = 1\n")
    from tests.support.packages import ray_package

    uri, _zip = ray_package(src, tmp_path)
    data = (src / "a.py").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    store = Store(tmp_path / "store")
    man = {"uri": uri, "kind": "working_dir",
           "entries": [{"path": "a.py", "is_dir": False, "mode": 0o644, "size": len(data),
                        "sha256": sha}]}
    assert delta.missing(store, delta.Manifest.parse(man)) == [sha]
    store.put_blob(sha, src / "a.py")
    LocalBackend(store.root).gc(dry_run=False, purge=True)  # between upload and commit
    delta.commit(store, delta.Manifest.parse(man))
    LocalBackend(store.root).gc(dry_run=False, purge=True)  # between commit and create
    handle = Environments(store).get_or_create({"working_dir": uri}, holder="h")
    assert (Path(str(handle.working_dir)) / "a.py").read_text() == "A = 1\n"


def test_a_pin_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTENV_UPLOAD_PIN_S", "0.2")
    store = Store(tmp_path / "store")
    [(sha, path)] = _blob_files(tmp_path, 1)
    store.put_blob(sha, path)
    assert LocalBackend(store.root).gc(dry_run=False, purge=True).removed == ()
    import time

    time.sleep(0.3)  # the pin's expiry is a time stamp: let it pass
    removed = LocalBackend(store.root).gc(dry_run=False, purge=True).removed
    assert [e.key for e in removed] == [f"blob:{sha}"]
    assert not store.blob_path(sha).exists()


def test_agent_check_then_purge_then_create(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """Over HTTP: a package found by `GET /api/packages/...` (push's existence check) is pinned
    as Ray's GET pins it, so a purge before the create does not take it."""
    import requests

    from rtenv_cli.core.transport.agent_http import AgentTarget
    from tests.support.agent import agent_process
    from tests.support.packages import ray_package

    src = tmp_path / "src"
    src.mkdir()
    (src / "main.py").write_text("X = 1\n")
    uri, pkg = ray_package(src, tmp_path)
    root = tmp_path / "agent-store"
    monkeypatch.setenv("RTENV_UPLOAD_PIN_S", "0")
    with agent_process(root) as agent:  # pushed long ago: no pin left
        AgentTarget(agent.url).upload(uri, pkg)
    monkeypatch.delenv("RTENV_UPLOAD_PIN_S")
    with agent_process(root) as agent:
        assert AgentTarget(agent.url).exists(uri)  # what push (and rtenv run) asks first
        gc = requests.post(f"{agent.url}/api/gc", json={"purge": True}, timeout=60)
        assert gc.status_code == 200
        assert gc.json()["removed"] == []
        resp = requests.post(f"{agent.url}/api/envs", timeout=60,
                             json={"runtime_env": {"working_dir": uri}, "holder": "run:1"})
        assert resp.status_code == 200, resp.text


def test_a_purge_between_build_and_reference_does_not_take_the_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The narrowest window: the entry is published, the environment's references not yet
    taken. A purge there used to remove it (the create then rebuilt it, up to six times)."""
    import zipfile

    archive = tmp_path / "w.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.py", "A = 1\n")
    store = Store(tmp_path / "store")
    envs = Environments(store)
    purges: list[list[str]] = []
    acquire = Environments._acquire

    def purge_then_acquire(self: Environments, *args: object, **kw: object) -> bool:
        if kw.get("db") is None:  # a create's own transaction: after its builds
            result = LocalBackend(store.root).gc(dry_run=False, purge=True)
            purges.append([e.key for e in result.removed])
        return acquire(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Environments, "_acquire", purge_then_acquire)
    handle = envs.get_or_create({"working_dir": f"file://{archive}"}, holder="h")
    assert (Path(str(handle.working_dir)) / "a.py").read_text() == "A = 1\n"
    assert purges[-1] == []  # nothing to take: the entry was held for the create
    assert len(handle.built) == 1
    # once the environment holds it, the create's own hold is gone
    held = store.index.conn().execute("SELECT env_key FROM refs").fetchall()
    assert [r[0] for r in held] == [handle.key]

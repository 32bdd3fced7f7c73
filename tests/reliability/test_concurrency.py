"""Concurrency against real agent processes: many creates at once, purges racing creates and
delta pushes, two agents on one store root, and a watch under a storm of changes.

Every test counts its trials and failures; the long variants (marked slow) run more of them.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path

from rtenv_cli.core.transport.agent_http import AgentTarget
from rtenv_cli.core.watch.delta import push_delta
from rtenv_cli.core.watch.snapshot import Snapshot
from tests.support.agent import AgentProc, agent_process
from tests.support.cli import run_process
from tests.support.packages import make_tree, ray_package


class _Client:
    """Raw creates with this user's token; a session (a connection) per thread."""

    def __init__(self, agent: AgentProc) -> None:
        self.url = agent.url
        self.headers = {"Authorization": f"Bearer {agent.token}"} if agent.token else {}
        self.local = threading.local()

    def post(self, path: str, body: dict[str, Any], timeout: float = 300) -> requests.Response:
        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
        return session.post(self.url + path, json=body, headers=self.headers, timeout=timeout)

    def create(self, runtime_env: dict[str, Any], holder: str) -> dict[str, Any]:
        resp = self.post("/api/envs", {"runtime_env": runtime_env, "holder": holder,
                                       "lease_s": 600})
        assert resp.status_code == 200, resp.text
        return dict(resp.json())


def _packages(tmp_path: Path, agent: AgentProc, n: int, tag: str = "") -> list[str]:
    uris = []
    target = AgentTarget(agent.url, agent.token)
    for i in range(n):
        src = make_tree(tmp_path / f"src{tag}{i}", {"main.py": f"N = {i}\n",
                                                    "pkg/data.txt": f"{tag}{i}\n" * 50})
        uri, zpath = ray_package(src, tmp_path)
        target.upload(uri, zpath)
        uris.append(uri)
    return uris


def _many_creates(tmp_path: Path, agent: AgentProc, identical: int, different: int,
                  threads: int) -> None:
    uris = _packages(tmp_path, agent, different + 1)
    client = _Client(agent)
    same = {"working_dir": uris[0], "uv": ["six==1.16.0"]}
    jobs = [(same, f"same{i}") for i in range(identical)]
    jobs += [({"working_dir": uri}, f"diff{i}.{k}") for i, uri in enumerate(uris[1:])
             for k in range(2)]  # each different env asked for twice at once
    jobs.sort(key=lambda job: hash(job[1]))  # interleaved
    failures: list[str] = []

    def create(job: tuple[dict[str, Any], str]) -> tuple[str, dict[str, Any]]:
        try:
            return job[1], client.create(*job)
        except Exception as exc:  # counted below
            failures.append(f"{job[1]}: {exc}")
            raise

    with ThreadPoolExecutor(threads) as pool:
        results = dict(pool.map(create, jobs))
    assert failures == []
    builds = Counter(entry for handle in results.values() for entry in handle["built"])
    assert set(builds.values()) == {1}, builds  # each distinct entry built exactly once
    assert len(builds) == different + 2  # every working_dir, and the one venv
    same_keys = {results[f"same{i}"]["key"] for i in range(identical)}
    assert len(same_keys) == 1
    for i in range(1, different + 1):
        handle = results[f"diff{i - 1}.0"]
        assert handle["key"] == results[f"diff{i - 1}.1"]["key"]
        assert (Path(handle["working_dir"]) / "main.py").read_text() == f"N = {i}\n"
    listing = requests.get(f"{agent.url}/api/cache", headers=client.headers, timeout=30).json()
    refs = {e["key"]: e["refs"] for e in listing["entries"]}
    for key in results["same0"]["entries"]:
        assert refs[key] == identical


def test_100_identical_and_50_different_creates(tmp_path: Path) -> None:
    with agent_process(tmp_path / "store", user_token=True) as agent:
        _many_creates(tmp_path, agent, identical=100, different=50, threads=32)


@pytest.mark.slow
def test_identical_and_different_creates_on_two_worker_processes(tmp_path: Path) -> None:
    with agent_process(tmp_path / "store", "--workers", "2", user_token=True) as agent:
        _many_creates(tmp_path, agent, identical=300, different=150, threads=64)


# -- gc racing creates and pushes ----------------------------------------------------------------
class _Purges:
    """`POST /api/gc {"purge": true}` in a loop on a thread; what each removed."""

    def __init__(self, agent: AgentProc) -> None:
        self.client = _Client(agent)
        self.removed: list[str] = []
        self.errors: list[str] = []
        self.rounds = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            resp = self.client.post("/api/gc", {"purge": True})
            if resp.status_code != 200:
                self.errors.append(resp.text)
                return
            self.removed += [e["key"] for e in resp.json()["removed"]]
            self.rounds += 1

    def __enter__(self) -> _Purges:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=120)


def _race(tmp_path: Path, rounds: int) -> None:
    """Delta pushes and packages, each followed by a create, while purges loop: every create
    succeeds, and nothing an environment still holds is ever removed."""
    with agent_process(tmp_path / "store", user_token=True) as agent:
        client = _Client(agent)
        target = AgentTarget(agent.url, agent.token)
        failures: list[str] = []
        held: dict[str, tuple[Path, str]] = {}  # entry key -> (its working_dir, main.py)
        with _Purges(agent) as purges:
            for i in range(rounds):
                src = make_tree(tmp_path / f"r{i}", {"main.py": f"R = {i}\n",
                                                     "lib/x.py": f"X = {i}\n" * 20})
                try:
                    if i % 2:
                        snap = Snapshot(src)
                        snap.full_scan()
                        uri = push_delta(snap, target).uri
                    else:
                        uri, zpath = ray_package(src, tmp_path)
                        if not target.exists(uri):
                            target.upload(uri, zpath)
                    handle = client.create({"working_dir": uri}, f"run{i}")
                except Exception as exc:  # counted: the suite's failures
                    failures.append(f"round {i}: {exc}")
                    continue
                wd = Path(handle["working_dir"])
                if (wd / "main.py").read_text() != f"R = {i}\n":
                    failures.append(f"round {i}: wrong or missing working_dir")
                if i % 3:  # released: collectable
                    requests.delete(f"{agent.url}/api/envs/{handle['key']}/refs/run{i}",
                                    headers=client.headers, timeout=30)
                else:
                    held.update({k: (wd, f"R = {i}\n") for k in handle["entries"]})
        assert purges.errors == []
        assert failures == []
        assert purges.rounds > rounds  # the purges ran between the steps
        assert purges.removed  # and removed what was released
        assert set(purges.removed).isdisjoint(held)  # never what an environment held
        for wd, text in held.values():
            assert (wd / "main.py").read_text() == text


def test_purges_racing_pushes_and_creates_on_an_agent(tmp_path: Path) -> None:
    _race(tmp_path, 16)


@pytest.mark.slow
def test_purges_racing_pushes_and_creates_on_an_agent_long(tmp_path: Path) -> None:
    # 60 rounds: each of the six (delta or package) x (held or released) combinations of a
    # round 10 times against the looping purges; 150 gave the same combinations more draws
    # of the race's interleaving for 14 s of the suite's budget
    _race(tmp_path, 60)


# -- two agents on one root ----------------------------------------------------------------------
def test_two_agents_on_one_root(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with agent_process(root, user_token=True) as a, agent_process(root, user_token=True) as b:
        ca, cb = _Client(a), _Client(b)
        for agent in (a, b):  # both serve
            assert requests.get(f"{agent.url}/api/agent", headers=ca.headers,
                                timeout=10).json()["root"] == str(root.absolute())
        [uri] = _packages(tmp_path, a, 1)  # uploaded to one, known to both
        assert AgentTarget(b.url, b.token).exists(uri)

        # single flight across the two processes: one build of the venv and the working_dir
        runtime_env = {"working_dir": uri, "uv": ["six==1.16.0"]}
        jobs = [(ca if i % 2 else cb, f"h{i}") for i in range(20)]
        with ThreadPoolExecutor(20) as pool:
            handles = list(pool.map(lambda job: job[0].create(runtime_env, job[1]), jobs))
        builds = Counter(e for h in handles for e in h["built"])
        assert len(builds) == 2
        assert set(builds.values()) == {1}
        assert len({h["key"] for h in handles}) == 1

        # gc from one never deletes what the other references
        held = cb.create({"working_dir": uri}, "held-by-b")
        [other] = _packages(tmp_path, b, 1, tag="o")
        loose = cb.create({"working_dir": other}, "loose")
        requests.delete(f"{b.url}/api/envs/{loose['key']}/refs/loose", headers=cb.headers,
                        timeout=30)
        for h in handles:
            requests.delete(f"{a.url}/api/envs/{h['key']}/refs/{h['holder']}",
                            headers=ca.headers, timeout=30)
        removed = [e["key"] for e in ca.post("/api/gc", {"purge": True}).json()["removed"]]
        assert set(loose["entries"]) <= set(removed)  # it does collect
        assert set(held["entries"]).isdisjoint(removed)  # but not b's reference
        assert (Path(held["working_dir"]) / "main.py").read_text() == "N = 0\n"
        again = ca.create({"working_dir": uri}, "after")
        assert again["built"] == []  # still there, and a's index agrees
    db = sqlite3.connect(root / "index.sqlite")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        paths = [r[0] for r in db.execute("SELECT path FROM entries")]
    finally:
        db.close()
    assert all((root / p).exists() for p in paths)


# -- watch under a storm of changes ---------------------------------------------------------------
_STORM = """
import sys, time
from pathlib import Path
tree = Path(sys.argv[1])
start = time.monotonic()
for i in range(10_000):
    path = tree / "pkg" / f"m{i % 400}.py"  # rewrites, and 200 files created
    if i % 50 == 49 and path.exists():
        path.unlink()  # and some deleted
    else:
        path.write_text(f"V = {i}\\n")
print(10_000, time.monotonic() - start)
"""


@pytest.mark.slow
def test_watch_under_10000_changes_in_a_second(tmp_path: Path) -> None:
    shm = Path("/dev/shm")  # a tmpfs when there is one: this machine's disk may be too slow
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else tmp_path) as where:
        _storm(tmp_path, Path(where))


def _storm(tmp_path: Path, where: Path) -> None:
    from tests.core.watch.helpers import Running, wait_for

    tree = make_tree(where / "tree", {"main.py": "print('hi')\n",
                                      **{f"pkg/m{i}.py": f"V = {i}\n" for i in range(200)}})
    with agent_process(tmp_path / "store", user_token=True) as agent:
        target = AgentTarget(agent.url, agent.token)
        with Running(tree, target, quiet_s=0.2, max_wait_s=1.0) as run:
            # another process, as an editor or a build tool would be
            storm = subprocess.run([sys.executable, "-c", _STORM, str(tree)], check=True,
                                   capture_output=True, text=True, timeout=120).stdout.split()
            (tree / "main.py").write_text("print('last')\n")
            final = Snapshot(tree)
            final.full_scan()
            # the storm may overflow inotify's queue and lose the last edit's event: the
            # reconcile that follows a storm finds it within seconds (60 s is the periodic one)
            wait_for(lambda: run.events[-1].uri == final.uri, timeout=30)
            run.quiet(1.5)  # nothing more comes
            events = list(run.events)
        assert int(storm[0]) == 10_000
        assert float(storm[1]) < 5  # a storm, not a trickle (0.3-2 s on a tmpfs here)
        assert 2 <= len(events) <= 12  # the initial push and a few, not thousands
        assert events[-1].uri == final.uri
        assert target.exists(final.uri)
        pushed = run_process(["push", str(tree), "--to", agent.url, "--format", "json"])
        assert pushed.exit_code == 0, pushed.stderr
        assert final.uri in pushed.stdout  # a fresh push names the same package
        assert json.loads(pushed.stdout)


def test_a_file_deleted_after_the_snapshot_is_a_content_change(tmp_path: Path) -> None:
    """Found by the storm above: a file deleted between the snapshot and the blob upload
    raised FileNotFoundError out of the watch's thread, which then stopped pushing."""
    from rtenv_cli.core.transport.local_store import LocalStoreTarget
    from rtenv_cli.core.watch.zipcache import ContentChanged

    tree = make_tree(tmp_path / "tree", {"a.py": "A = 1\n", "b.py": "B = 1\n"})
    snap = Snapshot(tree)
    snap.full_scan()
    (tree / "b.py").unlink()
    with pytest.raises(ContentChanged) as err:
        push_delta(snap, LocalStoreTarget(tmp_path / "store"))
    assert err.value.relpath == "b.py"

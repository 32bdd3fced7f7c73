"""SIGKILL at random points: of the agent during env builds, package uploads (a chunked PUT) and
delta pushes (manifest, blob batch, commit), and of `rtenv run` on the embedded store.

After each kill the agent is restarted on the same root (or the store reopened), then: nothing
is left in tmp/ or trash/, every index row names what is on disk and everything on disk is
indexed, every published package verifies against its name (`rayhash.verify_package`), every
blob against its sha256, no unpacked environment is partial, and the same upload or create
succeeds. The quick variants run in the default suite; the long ones are marked slow (CI runs
both: `.ci/run` deselects nothing).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path

from rtenv_cli.core.store.rayhash import verify_package
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.transport.agent_http import AgentTarget
from rtenv_cli.core.watch.delta import push_delta
from rtenv_cli.core.watch.snapshot import Snapshot
from tests.support.agent import AgentProc, agent_process
from tests.support.packages import ray_package

FILES = 100  # files per tree: enough that each step takes a while to be killed in


def _tree(root: Path, seed: int) -> dict[str, bytes]:
    """A tree of FILES incompressible files (the content depends on `seed`)."""
    rng = random.Random(seed)  # noqa: S311 - test data, not crypto
    files = {f"d{n % 7}/f{n}.bin": rng.randbytes(rng.randint(1, 6000)) for n in range(FILES)}
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def _read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*") if p.is_file()}


def _throttled(path: Path, pause: float) -> Iterator[bytes]:
    """The file in 32 KiB chunks, a pause between them: a chunked body killed mid-way."""
    with path.open("rb") as fh:
        while chunk := fh.read(32 << 10):
            yield chunk
            time.sleep(pause)


@dataclass
class Trials:
    kills: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def count(self, kind: str) -> None:
        self.kills[kind] = self.kills.get(kind, 0) + 1


def check_store(root: Path, trees: dict[str, dict[str, bytes]],
                verified: set[tuple[str, int]] | None = None) -> list[str]:
    """What is wrong with the store at `root` after a restart (empty: nothing). `trees`: the
    files each package URI must unpack to; `verified`: (path, mtime) checked already."""
    verified = set() if verified is None else verified
    problems: list[str] = []
    problems += [f"left in tmp/: {p.name}" for p in (root / "tmp").iterdir()]
    problems += [f"left in trash/: {p.name}" for p in (root / "trash").iterdir()]
    if (root / "quarantine").exists():
        problems += [f"quarantined: {p.name}" for p in (root / "quarantine").iterdir()]
    store = Store(root, recover=False)
    try:
        entries = store.index.all()
        indexed = {e.path for e in entries} | {f"packages/{e.key[8:]}" for e in entries
                                               if e.kind == "package"}
        problems += [f"indexed but missing: {e.key}" for e in entries
                     if not (root / e.path).exists()]
        on_disk = {f"entries/{p.name}" for p in (root / "entries").iterdir()}
        on_disk |= {f"packages/{p.name}" for p in (root / "packages").iterdir()
                    if not p.name.endswith(".remote")}
        on_disk |= {f"manifests/{p.name}" for p in (root / "manifests").iterdir()}
        on_disk |= {f"blobs/{s.name}/{b.name}" for s in (root / "blobs").iterdir()
                    for b in s.iterdir()}
        problems += [f"on disk but not indexed: {p}" for p in sorted(on_disk - indexed)]
        for entry in entries:
            path = root / entry.path
            seen = (entry.path, path.stat().st_mtime_ns if path.exists() else 0)
            if seen in verified:
                continue
            verified.add(seen)
            if entry.kind == "blob" and path.exists():
                if hashlib.sha256(path.read_bytes()).hexdigest() != entry.key[5:]:
                    problems.append(f"blob {entry.key} does not match its name")
            elif entry.kind == "package" and path.exists():
                name = entry.key.removeprefix("package:")
                try:
                    verify_package(name, store.package_file(name))
                except Exception as exc:  # reported as a finding
                    problems.append(f"package {name} does not verify: {exc}")
            elif entry.kind == "working_dir" and path.exists():
                if not (path / "meta.json").exists():
                    problems.append(f"{entry.key} published without meta.json")
                elif _read_tree(path / "tree" / "d") != trees.get(entry.uri):
                    problems.append(f"{entry.key} ({entry.uri}) is partial or wrong")
    finally:
        store.close()
    return problems


class _Rounds:
    """One agent on `root`, restarted after each kill; the work of each round in a thread."""

    def __init__(self, tmp_path: Path, seed: int) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "store"
        self.rng = random.Random(seed)  # noqa: S311 - kill timing, not crypto
        self.trees: dict[str, dict[str, bytes]] = {}
        self.trials = Trials()
        self.n = 0
        self.verified: set[tuple[str, int]] = set()

    def package(self) -> tuple[str, Path]:
        self.n += 1
        src = self.tmp / f"src{self.n}"
        files = _tree(src, self.n)
        uri, zpath = ray_package(src, self.tmp)
        self.trees[uri] = files
        return uri, zpath

    def snapshot(self) -> Snapshot:
        self.n += 1
        src = self.tmp / f"src{self.n}"
        files = _tree(src, self.n)
        snap = Snapshot(src)
        snap.full_scan()
        self.trees[snap.uri] = files
        return snap

    # -- the steps killed ---------------------------------------------------------------------
    @staticmethod
    def upload(agent: AgentProc, uri: str, zpath: Path, pause: float) -> None:
        name = uri.removeprefix("gcs://")
        resp = requests.put(f"{agent.url}/api/packages/gcs/{name}", timeout=30,
                            data=_throttled(zpath, pause), headers=_auth(agent))
        assert resp.status_code == 200, resp.text

    @staticmethod
    def create(agent: AgentProc, uri: str) -> dict[str, object]:
        resp = requests.post(f"{agent.url}/api/envs", timeout=60, headers=_auth(agent),
                             json={"runtime_env": {"working_dir": uri}, "holder": "crash",
                                   "lease_s": 60})
        assert resp.status_code == 200, resp.text
        return dict(resp.json())

    def step(self, kind: str) -> tuple[Callable[[AgentProc], object],
                                       Callable[[AgentProc], object], float]:
        """(the work, what proves the same work succeeds afterwards, the longest kill delay)."""
        if kind == "upload":
            uri, zpath = self.package()
            pause = self.rng.choice([0.0, 0.002, 0.01])
            return (lambda a: self.upload(a, uri, zpath, pause),
                    lambda a: self.upload(a, uri, zpath, 0.0), 0.25 + pause * 30)
        if kind == "delta":
            snap = self.snapshot()
            return (lambda a: push_delta(snap, AgentTarget(a.url, a.token)),
                    lambda a: self._pushed(a, snap), 0.3)
        if kind == "build":
            uri, zpath = self.package()
            return (lambda a: (self.upload(a, uri, zpath, 0.0), self.create(a, uri)),
                    lambda a: (self.upload(a, uri, zpath, 0.0), self._created(a, uri)), 0.4)
        snap = self.snapshot()  # build_delta: an env over a delta package (zip assembled)
        return (lambda a: (push_delta(snap, AgentTarget(a.url, a.token)),
                           self.create(a, snap.uri)),
                lambda a: self._pushed_and_created(a, snap), 0.45)

    @staticmethod
    def _pushed(agent: AgentProc, snap: Snapshot) -> None:
        result = push_delta(snap, AgentTarget(agent.url, agent.token))
        assert result.uri == snap.uri

    def _pushed_and_created(self, agent: AgentProc, snap: Snapshot) -> None:
        self._pushed(agent, snap)
        self._created(agent, snap.uri)

    def _created(self, agent: AgentProc, uri: str) -> None:
        handle = self.create(agent, uri)
        assert _read_tree(Path(str(handle["working_dir"]))) == self.trees[uri]

    def run(self, rounds: int, extra: tuple[str, ...] = ()) -> Trials:
        kinds = ["upload", "delta", "build", "build_delta"]
        agent = None
        try:
            for r in range(rounds):
                kind = kinds[r % len(kinds)]
                work, again, longest = self.step(kind)
                if agent is None:
                    agent = self._start(extra)
                thread = threading.Thread(target=_quietly, args=(work, agent), daemon=True)
                thread.start()
                time.sleep(self.rng.uniform(0.0, longest))
                agent.kill(signal.SIGKILL)
                thread.join(timeout=60)
                self.trials.count(kind)
                agent = self._start(extra)  # restart: recovery
                for problem in check_store(self.root, self.trees, self.verified):
                    self.trials.failures.append(f"round {r} ({kind}): {problem}")
                try:
                    again(agent)
                except Exception as exc:  # reported as a finding
                    self.trials.failures.append(f"round {r} ({kind}): redo failed: {exc}")
        finally:
            self._stop()
        return self.trials

    def _start(self, extra: tuple[str, ...]) -> AgentProc:
        self._stop()
        self._ctx = agent_process(self.root, *extra)
        return self._ctx.__enter__()

    def _stop(self) -> None:
        ctx, self._ctx = getattr(self, "_ctx", None), None
        if ctx is not None:
            ctx.__exit__(None, None, None)


def _auth(agent: AgentProc) -> dict[str, str]:
    return {"Authorization": f"Bearer {agent.token}"} if agent.token else {}


def _quietly(work: Callable[[AgentProc], object], agent: AgentProc) -> None:
    with contextlib.suppress(Exception):  # the agent was killed under it: expected
        work(agent)


def _report(name: str, trials: Trials) -> None:
    kills = sum(trials.kills.values())
    print(f"\n{name}: {kills} kills {trials.kills}, {len(trials.failures)} failures")


def test_agent_killed_during_uploads_deltas_and_builds(tmp_path: Path) -> None:
    trials = _Rounds(tmp_path, seed=17).run(20)
    _report("agent SIGKILL", trials)
    assert trials.failures == []
    assert sum(trials.kills.values()) == 20


@pytest.mark.slow
def test_agent_killed_during_uploads_deltas_and_builds_long(tmp_path: Path) -> None:
    # 32 rounds: 8 kills of each of the four kinds at other random points than the quick
    # variant's (each round restarts the agent, ~1.2 s on 2 cores). Every step, recovery and
    # check runs in either variant; more rounds only sample more kill instants (60 took 75 s
    # of the suite's 20-minute budget for the same code paths).
    trials = _Rounds(tmp_path, seed=1717).run(32)
    _report("agent SIGKILL (long)", trials)
    assert trials.failures == []
    assert sum(trials.kills.values()) == 32


# -- `rtenv run` on the embedded store -----------------------------------------------------------
def _run_cmd(env_file: Path) -> list[str]:
    return [sys.executable, "-m", "rtenv_cli", "run", "-r", str(env_file), "--",
            sys.executable, "-c", _COUNT]


_COUNT = "import pathlib; print(len(list(pathlib.Path('.').rglob('*.bin'))))"


def _run_rounds(tmp_path: Path, rounds: int, seed: int) -> Trials:
    rng = random.Random(seed)  # noqa: S311 - kill timing, not crypto
    root = Path(os.environ["RTENV_HOME"]) / "store"
    trials = Trials()
    trees: dict[str, dict[str, bytes]] = {}
    for r in range(rounds):
        src = tmp_path / f"wd{r}"
        files = _tree(src, 1000 + r)
        env_file = tmp_path / f"env{r}.json"
        env_file.write_text(json.dumps({"working_dir": str(src)}))
        proc = subprocess.Popen(_run_cmd(env_file), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 1.6))  # start-up, packing, publishing, unpacking, the command
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        trials.count("rtenv run")
        trees[_ray_uri(src)] = files
        Store(root).close()  # what the next `rtenv run` does first: recovery, alone
        for problem in check_store(root, trees):
            trials.failures.append(f"round {r}: {problem}")
        done = subprocess.run(_run_cmd(env_file), capture_output=True, text=True, timeout=120,
                              check=False)
        if done.returncode != 0 or done.stdout.strip() != str(len(files)):
            trials.failures.append(f"round {r}: rerun exit {done.returncode}: "
                                   f"{done.stdout[-200:]}{done.stderr[-400:]}")
    return trials


def _ray_uri(src: Path) -> str:
    from ray._private.runtime_env.packaging import get_uri_for_directory

    return str(get_uri_for_directory(str(src), include_gitignore=True))


def test_rtenv_run_killed_at_random_points(tmp_path: Path) -> None:
    trials = _run_rounds(tmp_path, 3, seed=3)
    _report("rtenv run SIGKILL", trials)
    assert trials.failures == []


@pytest.mark.slow
def test_rtenv_run_killed_at_random_points_long(tmp_path: Path) -> None:
    # 10 rounds (~2 s each): kill instants drawn over the whole 0.3-1.6 s window (start-up,
    # packing, publishing, unpacking, the command), each followed by the recovery, the store
    # check and a rerun; 20 rounds sampled the same window twice as densely for 40 s
    trials = _run_rounds(tmp_path, 10, seed=33)
    _report("rtenv run SIGKILL (long)", trials)
    assert trials.failures == []


_KILLED_AT_RENAME = """
import os, signal, sys
from pathlib import Path
from rtenv_cli.core.store.store import Store
store = Store(Path(sys.argv[1]))
def die(*_a, **_k):
    os.kill(os.getpid(), signal.SIGKILL)
os.replace = os.rename = die  # killed with the manifest written, before it is published
store.put_manifest("_ray_pkg_" + "ab" * 8 + ".zip", {"entries": []}, 0)
"""


def test_a_manifest_killed_before_its_rename_leaves_nothing(tmp_path: Path) -> None:
    """Found by the agent rounds: a delta commit killed mid-write left
    `manifests/.<name>.json.<rand>.tmp`, which no recovery removed."""
    root = tmp_path / "store"
    Store(root).close()
    proc = subprocess.run([sys.executable, "-c", _KILLED_AT_RENAME, str(root)], check=False,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL
    Store(root).close()  # recovery
    assert list((root / "manifests").iterdir()) == []
    assert list((root / "tmp").iterdir()) == []

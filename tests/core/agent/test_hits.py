"""The agent's ASGI front (agent.hits): cache hits of `POST /api/envs` answered before
Starlette's routing, committed together, behind the same token check and with the same error
replies as the route; a hit that meets another writer's lock waits off the event loop."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path

from rtenv_cli.core.agent.hits import create_app
from rtenv_cli.core.agent.server import AgentConfig
from rtenv_cli.core.transport.agent_http import AgentTarget
from tests.support.agent import agent_process
from tests.support.packages import make_tree, ray_package
from tests.support.wait import until

TOKEN = "s3cret-token"  # noqa: S105 - a test token


def _flock_waiters(path: Path) -> int:
    """How many flock(2) calls wait for PATH's lock (/proc/locks marks them `->`)."""
    inode = f":{path.stat().st_ino}"
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if "->" in line.split() and any(f.endswith(inode) for f in line.split()))


def test_cache_hits_answered_early_keep_auth_and_errors(tmp_path: Path) -> None:
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "A = 1\n"}), tmp_path)
    with agent_process(tmp_path / "s", token=TOKEN) as agent:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        AgentTarget(agent.url, token=TOKEN).upload(uri, zpath)
        body = {"runtime_env": {"working_dir": uri}, "holder": "h1"}
        url = f"{agent.url}/api/envs"
        first = requests.post(url, json=body, headers=auth, timeout=30)
        assert first.status_code == 200
        assert first.json()["built"]
        hit = requests.post(url, json={**body, "holder": "h2"}, headers=auth, timeout=30)
        assert hit.status_code == 200
        assert hit.json() == {**first.json(), "holder": "h2", "built": []}
        assert requests.post(url, json=body, timeout=30).status_code == 401  # a hit needs it too
        assert requests.post(url, json=body, headers={"Authorization": "Bearer no"},
                             timeout=30).status_code == 403
        bad = requests.post(url, data=b"{not json", headers=auth, timeout=30)
        assert bad.status_code == 400
        assert "not JSON" in bad.json()["error"]["message"]
        missing = requests.post(url, json={"runtime_env": {}}, headers=auth, timeout=30)
        assert missing.status_code == 400


def test_concurrent_hits_share_commits_and_each_holds_its_reference(tmp_path: Path) -> None:
    """Hits that arrive together are committed together (one transaction per event-loop turn);
    each still gets its answer and its own reference, and a miss among them is built."""
    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "A = 1\n"}), tmp_path)
    other, other_zip = ray_package(make_tree(tmp_path / "wd2", {"b.py": "B = 1\n"}), tmp_path)
    with agent_process(tmp_path / "s") as agent:
        AgentTarget(agent.url).upload(uri, zpath)
        AgentTarget(agent.url).upload(other, other_zip)
        url = f"{agent.url}/api/envs"
        first = requests.post(url, json={"runtime_env": {"working_dir": uri}, "holder": "h0"},
                              timeout=30).json()

        def post(i: int) -> dict:
            wd = other if i == 7 else uri  # one miss in the crowd
            resp = requests.post(url, json={"runtime_env": {"working_dir": wd},
                                            "holder": f"h{i + 1}"}, timeout=60)
            assert resp.status_code == 200, resp.text
            return dict(resp.json())

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, range(48)))
        hits = [a for i, a in enumerate(answers) if i != 7]
        assert {a["key"] for a in hits} == {first["key"]}
        assert all(a["built"] == [] for a in hits)
        assert answers[7]["built"]  # the miss was built by the slow path
        envs = requests.get(f"{agent.url}/api/envs", timeout=30).json()["envs"]
        holders = {e["key"]: e["holders"] for e in envs}
        assert holders[first["key"]] == 48  # h0 and 47 hits, each its own reference


def test_a_create_error_is_the_same_on_the_hit_path_and_the_route(tmp_path: Path) -> None:
    """AgentApp answers a refused create itself; the route gives the same reply when called
    on its own (the checks are one function)."""
    import httpx

    app = create_app(AgentConfig(root=tmp_path / "s"))
    body = {"runtime_env": {}, "holder": "h", "pid": "abc"}
    transport = httpx.ASGITransport(app=app.app)  # Starlette alone, without AgentApp
    import asyncio

    async def both() -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as front, \
                httpx.AsyncClient(transport=transport, base_url="http://t") as inner:
            return (await front.post("/api/envs", json=body),
                    await inner.post("/api/envs", json=body))

    front, inner = asyncio.run(both())
    assert front.status_code == inner.status_code == 400
    assert front.json() == inner.json()
    assert front.json()["error"]["code"] == "usage"


def test_a_hit_waits_for_another_writer_without_stopping_the_agent(tmp_path: Path) -> None:
    """While another process holds the store's write lock (a CLI gc, another --workers
    process), a cache hit waits for it off the event loop: the agent keeps answering, and the
    hit is answered (its reference recorded) once the lock is free."""
    import fcntl
    import os

    uri, zpath = ray_package(make_tree(tmp_path / "wd", {"a.py": "A = 1\n"}), tmp_path)
    with agent_process(tmp_path / "s") as agent:
        AgentTarget(agent.url).upload(uri, zpath)
        url = f"{agent.url}/api/envs"
        body = {"runtime_env": {"working_dir": uri}, "holder": "first"}
        assert requests.post(url, json=body, timeout=30).status_code == 200
        fd = os.open(tmp_path / "s" / "index.sqlite.wlock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with ThreadPoolExecutor(1) as pool:
                waiting = pool.submit(requests.post, url, json={**body, "holder": "second"},
                                      timeout=30)
                until(lambda: _flock_waiters(tmp_path / "s" / "index.sqlite.wlock") > 0,
                      what="the hit waiting for the write lock")
                assert not waiting.done()
                # the event loop is free: another request is answered meanwhile
                assert requests.get(f"{agent.url}/api/agent", timeout=5).status_code == 200
                fcntl.flock(fd, fcntl.LOCK_UN)
                assert waiting.result().status_code == 200
        finally:
            os.close(fd)
        envs = requests.get(url, timeout=30).json()["envs"]
        assert [e["holders"] for e in envs] == [2]


@pytest.mark.parametrize("change", [
    {"holder": ""}, {"holder": 5}, {"holder": ["h"]}, {"pid": "abc"}, {"pid": 0},
    {"lease_s": -1}, {"extra": 1}, {"extra": {"a": 1}}])
def test_a_known_runtime_env_still_has_its_request_checked(tmp_path: Path,
                                                           change: dict) -> None:
    """The hit path checks a runtime_env once; the rest of every request is checked every
    time, with the same answer as Starlette's route gives."""
    import asyncio

    import httpx

    app = create_app(AgentConfig(root=tmp_path / "s"))
    good = {"runtime_env": {"env_vars": {"A": "1"}}, "holder": "h"}
    bad = {**good, **change}

    async def run() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as front, \
                httpx.AsyncClient(transport=httpx.ASGITransport(app=app.app),
                                  base_url="http://t") as inner:
            ok = await front.post("/api/envs", json=good)
            return ok, await front.post("/api/envs", json=bad), \
                await inner.post("/api/envs", json=bad)

    ok, front, inner = asyncio.run(run())
    assert ok.status_code == 200
    assert front.status_code == inner.status_code == 400
    assert front.json() == inner.json()

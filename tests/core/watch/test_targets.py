"""Watch pushes to a real `rtenv agent` (delta protocol) and to a real Ray head (whole zips)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.transport.resolve import resolve_target as resolve
from tests.core.watch.helpers import Running
from tests.support.agent import agent_process


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    for i in range(30):
        (root / f"mod{i}.py").write_bytes(os.urandom(3000))
    (root / "main.py").write_text("VALUE = 'v1'\n")
    return root


def test_delta_to_a_real_agent_sends_only_the_changed_file(tree: Path, tmp_path: Path) -> None:
    with agent_process(tmp_path / "agent-store") as agent:
        target = resolve(None, agent.url)
        assert type(target).__name__ == "AgentTarget"
        with Running(tree, target) as run:
            assert run.events[0].bytes_sent >= 30 * 3000
            (tree / "main.py").write_text("VALUE = 'v2'\n")
            ev = run.next_event(1)
            assert ev.modified == ("main.py",)
            assert target.exists(ev.uri)
            # one small blob and one manifest, not the package
            assert ev.bytes_sent < 10_000


def test_a_watch_publishes_as_soon_as_its_stopped_agent_is_back(tree: Path,
                                                                tmp_path: Path) -> None:
    """The agent is SIGKILLed while the watch runs, files change, the agent comes back on its
    port: the watch publishes by itself (no reconcile: it is an hour away), and its report
    counts every change since the last push that reached the agent, not 0/0/0 (issue 22 L10)."""
    import signal

    from rtenv_cli.core.packaging.hashing import package_uri
    from tests.core.watch.helpers import wait_for

    root = tmp_path / "agent-store"
    with agent_process(root) as agent:
        port = int(agent.url.rsplit(":", 1)[1])
        target = resolve(None, agent.url)
        with Running(tree, target, reconcile_s=3600) as run:
            agent.kill(signal.SIGKILL)
            (tree / "main.py").write_text("VALUE = 'v2'\n")
            wait_for(lambda: any("trying again until it answers" in m
                                 for _k, m, _h in run.notices), timeout=60)
            (tree / "new.py").write_text("NEW = 1\n")
            (tree / "mod0.py").unlink()
            # the second batch has failed too (its files are the snapshot's), still unpublished
            wait_for(lambda: run.session.sources[0].snap.uri != run.events[0].uri
                     and "new.py" in (run.session._unpublished or ((), ()))[0].added,
                     timeout=60)
            assert len(run.events) == 1
            with agent_process(root, port=port) as again:
                ev = run.next_event(1, timeout=60)
                assert ev.trigger == "retry"
                assert (ev.added, ev.modified, ev.removed) == (("new.py",), ("main.py",),
                                                               ("mod0.py",))
                assert ev.uri == package_uri(tree, kind="working_dir")  # a fresh push's
                assert resolve(None, again.url).exists(ev.uri)


@pytest.mark.ray
@pytest.mark.parametrize("via", ["dashboard", "gcs"])
def test_push_to_ray_pins_and_workers_see_each_version(tree: Path, ray_cluster: Any,
                                                       via: str) -> None:
    address = ray_cluster.dashboard_url if via == "dashboard" else ray_cluster.address
    target = resolve(None, address)
    assert type(target).__name__ == {"dashboard": "RayDashboardTarget",
                                     "gcs": "RayGcsTarget"}[via]
    calls: list[str] = []
    original = target.exists

    def counting_exists(uri: str, **kw: Any) -> bool:
        calls.append(uri)
        return bool(original(uri, **kw))

    target.exists = counting_exists  # type: ignore[method-assign]
    with Running(tree, target, pin_s=0.2) as run:
        (tree / "main.py").write_text("VALUE = 'v2'\n")
        ev = run.next_event(1)
        assert ev.bytes_sent > 0
        last = run.session.sources[0].last_zip
        assert last is not None
        assert last.reused == 30  # only main.py was compressed again
        assert (last.reused, last.compressed) == (30, 1)
        first_uri = run.events[0].uri
        # both URIs (the current and the previous version) stay pinned while watching
        from tests.core.watch.helpers import wait_for

        wait_for(lambda: calls.count(first_uri) >= 3, timeout=10)
        wait_for(lambda: calls.count(ev.uri) >= 3, timeout=10)
    code = (
        "import ray\n"
        f"ray.init(runtime_env={{'working_dir': {ev.uri!r}}})\n"
        "@ray.remote\n"
        "def f():\n"
        "    import main\n"
        "    return main.VALUE\n"
        "print('VALUE=' + ray.get(f.remote()))\n"
    )
    proc = ray_cluster.run_driver(code)
    assert "VALUE=v2" in proc.stdout, proc.stderr[-2000:]


def _in_gcs(target: Any, uri: str) -> bool:
    """Whether the GCS holds `uri`, asked without pinning it (unlike `exists`)."""
    from rtenv_cli.core.transport.grpc_unary import field_bytes, parse_fields

    reply = target.channel().unary("/ray.rpc.InternalKVGcsService/InternalKVExists",
                                   field_bytes(1, uri.encode()))
    return any(n == 2 and v for n, v in parse_fields(reply))


@pytest.mark.ray
def test_to_a_gcs_the_upload_starts_in_the_quiet_period_and_a_superseded_one_expires(
        tree: Path, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prepared zip is uploaded while the batch still gathers, pinned only briefly; the
    push at the end of the quiet period publishes it (10-minute pin, one event). A version
    saved over within the quiet period is cancelled or, if already uploaded, left to expire:
    the GCS deletes it when its short pin runs out."""
    from rtenv_cli.core.watch import early
    from tests.core.watch.helpers import wait_for

    monkeypatch.setattr(early, "EARLY_PIN_S", 2)
    probe = resolve(None, ray_cluster.address)
    with Running(tree, resolve(None, ray_cluster.address), quiet_s=30, max_wait_s=60) as run:
        src = run.session.sources[0]
        with open(tree / "main.py", "w") as fh:  # a write still open: the quiet period runs
            fh.write("VALUE = 'early'\n")
            fh.flush()
            prepared = wait_for(lambda: src.prepared, timeout=10)
            wait_for(lambda: _in_gcs(probe, prepared.uri), timeout=10)
            assert len(run.events) == 1  # uploaded, not yet published
        ev = run.next_event(1)  # the close
        assert ev.uri == prepared.uri
        assert ev.modified == ("main.py",)
        assert ev.bytes_sent == prepared.zip_bytes  # sent once, early

        with open(tree / "main.py", "w") as fh:
            fh.write("VALUE = 'superseded'\n")
            fh.flush()
            first = wait_for(lambda: src.prepared, timeout=10)
            wait_for(lambda: _in_gcs(probe, first.uri), timeout=10)
            fh.seek(0)
            fh.truncate()
            fh.write("VALUE = 'final'\n")
        ev = run.next_event(2)
        assert ev.uri != first.uri
        assert len(run.events) == 3
    assert _in_gcs(probe, ev.uri)
    wait_for(lambda: not _in_gcs(probe, first.uri), timeout=20)  # its 2 s pin ran out
    assert _in_gcs(probe, ev.uri)  # the published one stays (pinned for 10 minutes)
    probe.close()


@pytest.mark.ray
def test_early_uploads_of_two_sources_share_their_connection_in_turn(
        tmp_path: Path, ray_cluster: Any) -> None:
    """A working_dir and a py_module changed by one save: both early uploads run, one after
    the other on the early connection, and the push publishes both."""
    from tests.core.watch.helpers import wait_for

    app = tmp_path / "app"
    lib = app / "lib"
    lib.mkdir(parents=True)
    for i in range(20):
        (app / f"m{i}.py").write_bytes(os.urandom(200_000))
        (lib / f"l{i}.py").write_bytes(os.urandom(200_000))
    spec = tmp_path / "runtime_env.yaml"
    spec.write_text(f"working_dir: {app}\npy_modules: [{lib}]\n")
    probe = resolve(None, ray_cluster.address)
    with Running(spec, resolve(None, ray_cluster.address), quiet_s=30, max_wait_s=60) as run:
        uploader = run.session.publisher.early  # type: ignore[attr-defined]
        # writes still open: the quiet period runs, and the early uploads in it
        with open(app / "m0.py", "wb") as one, open(lib / "l0.py", "wb") as two:
            one.write(os.urandom(200_000))
            two.write(os.urandom(200_000))
            one.flush()
            two.flush()
            wait_for(lambda: len(uploader._uploads) == 2, timeout=10)
        ev = run.next_event(1, timeout=60)
        assert set(ev.uris) == {"working_dir", "py_modules[0]"}
        for uri in ev.uris.values():
            assert _in_gcs(probe, uri)
        assert ev.bytes_sent > 2 * 20 * 200_000
        assert all(j.thread is None or not j.thread.is_alive() for j in uploader._stale)
        assert uploader._tail is not None
    probe.close()


@pytest.mark.ray
def test_a_watch_keeps_only_the_versions_a_job_may_need_in_the_gcs(
        tree: Path, ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each save is a whole zip in the GCS: a session keeps pinned the current version and
    the one before it; older ones are no longer re-pinned and the GCS drops them when their
    short pin (HOLD_S) ends. A job running on an old version holds it itself (Ray counts a
    job's references; what becomes of it after the job is Ray's). The last version stays
    pinned for Ray's 10 minutes after the watch ends, as after a one-shot push."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    from rtenv_cli.core.watch import session as session_mod
    from tests.core.watch.helpers import wait_for

    monkeypatch.setattr(session_mod, "HOLD_S", 3)
    probe = resolve(None, ray_cluster.address)
    flag = tree.parent / "job-may-end"
    (tree / "job.py").write_text(
        "import os, time\n"
        f"while not os.path.exists({str(flag)!r}):\n"
        "    time.sleep(0.1)\n")
    with Running(tree, resolve(None, ray_cluster.address), early_upload=False) as run:
        assert run.session.loop.pin_s == 1  # HOLD_S / 3
        used = run.events[0].uri
        client = JobSubmissionClient(ray_cluster.dashboard_url)
        job = client.submit_job(entrypoint="python job.py", runtime_env={"working_dir": used})
        wait_for(lambda: client.get_job_status(job) == JobStatus.RUNNING, timeout=120)
        uris = [used]
        for i in range(3):
            (tree / "main.py").write_text(f"VALUE = 'v{i}'\n")
            uris.append(run.next_event(i + 1).uri)
        assert run.session.pinned == {"working_dir": uris[-2:]}
        wait_for(lambda: not _in_gcs(probe, uris[1]), timeout=30)  # superseded, unpinned
        assert all(_in_gcs(probe, u) for u in uris[-2:])  # current and previous: kept
        assert _in_gcs(probe, used)  # the running job holds its version
        flag.write_text("")
        wait_for(lambda: client.get_job_status(job) == JobStatus.SUCCEEDED, timeout=60)
        last = uris[-1]
    wait_for(lambda: not _in_gcs(probe, uris[-2]), timeout=30)
    assert _in_gcs(probe, last)  # pinned for 10 minutes at the end of the watch
    probe.close()

"""`rtenv cache ls|gc|purge` on the embedded store."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from rtenv_cli.core.store.envs import Environments
from rtenv_cli.core.store.store import Store
from tests.support.cli import run_cli


def _seed() -> tuple[Store, str]:
    store = Store()
    envs = Environments(store)
    held = envs.get_or_create({"pip": ["six==1.16.0"]}, holder="me", pid=os.getpid())
    store.get_or_build("uv:old", kind="uv", uri="uv://old", label="old env",
                       build=lambda t: (t / "f").write_bytes(b"x" * 10000))
    with store.index.tx() as db:
        db.execute("UPDATE entries SET last_used_at=? WHERE key='uv:old'",
                   (time.time() - 3 * 86400,))
    return store, held.entries[0]


def test_ls_text_and_json() -> None:
    _seed()
    text = run_cli(["cache", "ls"])
    assert text.exit_code == 0
    assert "six==1.16.0" in text.stdout
    assert "old env" in text.stdout
    assert "reclaimable" in text.stdout
    data = run_cli(["cache", "ls", "--format", "json"]).json
    assert set(data) >= {"entries", "totals"}
    by_label = {e["label"]: e for e in data["entries"]}
    assert by_label["six==1.16.0"]["refs"] == 1
    assert by_label["old env"]["refs"] == 0
    assert set(by_label["old env"]) >= {"kind", "uri", "label", "size_bytes", "refs",
                                        "created_at", "last_used_at"}
    assert data["totals"]["reclaimable_bytes"] == by_label["old env"]["size_bytes"]
    assert data["totals"]["uv_cache_bytes"] > 0  # six came through the shared uv cache
    assert "uv cache (shared by the venvs" in text.stdout
    only_uv = run_cli(["cache", "ls", "--kind", "uv", "--format", "json"]).json
    assert [e["label"] for e in only_uv["entries"]] == ["old env"]


def test_ls_by_use_in_text_and_json() -> None:
    _seed()
    unused = run_cli(["cache", "ls", "--use", "unused", "--format", "json"]).json
    assert [e["label"] for e in unused["entries"]] == ["old env"]
    assert unused["totals"]["count"] == 1  # the totals are those of what is shown
    held = run_cli(["cache", "ls", "--use", "in-use", "--kind", "pip"])
    assert held.exit_code == 0, held.stderr
    assert "six==1.16.0" in held.stdout
    assert "old env" not in held.stdout
    assert "1 entries" in held.stdout


def test_node_and_only_need_a_ray_cluster() -> None:
    for args in (["--node", "10.0.0.7"], ["--only", "rtenv"]):
        res = run_cli(["cache", "ls", *args])
        assert res.exit_code == 2, res.output
        assert "select the nodes of a Ray cluster" in res.stderr
        assert "hint: add --address" in res.stderr


def test_gc_dry_run_prompt_and_yes() -> None:
    store, held = _seed()
    dry = run_cli(["cache", "gc", "--older-than", "1d", "--dry-run"])
    assert dry.exit_code == 0
    assert "Would remove 1 entries" in dry.stdout
    assert store.index.get("uv:old") is not None
    refused = run_cli(["cache", "gc", "--older-than", "1d"])
    assert refused.exit_code == 2
    assert "--yes" in refused.stderr
    declined = run_cli(["cache", "gc", "--older-than", "1d"], input="n\n",
                       env={"RTENV_ASSUME_TTY": "1"})
    assert declined.exit_code == 1
    assert store.index.get("uv:old") is not None
    done = run_cli(["cache", "gc", "--older-than", "1d", "--yes", "--format", "json"])
    assert done.exit_code == 0
    assert [e["key"] for e in done.json["removed"]] == ["uv:old"]
    assert store.index.get("uv:old") is None
    assert store.index.get(held) is not None


def test_purge_keeps_referenced() -> None:
    store, held = _seed()
    res = run_cli(["cache", "purge", "--yes"])
    assert res.exit_code == 0
    assert "Removed 1 entries" in res.stdout
    assert store.index.get(held) is not None
    again = run_cli(["cache", "purge", "--yes"])
    assert "Nothing to remove" in again.stdout


def test_keep_storage_and_bad_values() -> None:
    store, _held = _seed()
    res = run_cli(["cache", "gc", "--keep-storage", "1B", "--yes", "--format", "json"])
    assert [e["key"] for e in res.json["removed"]] == ["uv:old"]
    bad = run_cli(["cache", "gc", "--keep-storage", "lots"])
    assert bad.exit_code == 2
    assert "cannot read size" in bad.stderr
    assert Path(store.root).exists()


def test_purge_prunes_uv_cache_of_removed_envs() -> None:
    store = Store()
    envs = Environments(store)
    held = envs.get_or_create({"pip": ["six==1.16.0"]}, holder="x")
    envs.release(held.key, "x")
    res = run_cli(["cache", "purge", "--yes", "--format", "json"])
    assert res.exit_code == 0
    assert res.json["uv_cache_pruned_bytes"] >= 0
    assert [e["key"] for e in res.json["removed"]] == list(held.entries)


def test_address_of_an_rtenv_agent_works_like_agent(tmp_path: Path) -> None:
    from tests.support.agent import agent_process

    with agent_process(tmp_path / "store") as agent:
        for args in (["--address", agent.url], ["--agent", agent.url]):
            ls = run_cli(["cache", "ls", *args, "--format", "json"])
            assert ls.exit_code == 0, ls.stderr
            assert agent.url in ls.json["source"]
            gc = run_cli(["cache", "gc", *args, "--yes", "--format", "json"])
            assert gc.exit_code == 0, gc.stderr
            purge = run_cli(["cache", "purge", *args, "--dry-run", "--format", "json"])
            assert purge.exit_code == 0, purge.stderr
        via_env = run_cli(["cache", "ls"], env={"RAY_ADDRESS": agent.url})
        assert via_env.exit_code == 0, via_env.stderr


def test_address_that_cache_cannot_use_is_a_usage_error() -> None:
    res = run_cli(["cache", "ls", "--address", "file:///shared/dir"])
    assert res.exit_code == 2
    assert "cannot use file:///shared/dir, a shared directory" in res.stderr
    assert "Traceback" not in res.stderr


def test_unreachable_gcs_address_is_one_clear_line() -> None:
    from tests.support.ports import free_port

    res = run_cli(["cache", "ls", "--address", f"127.0.0.1:{free_port()}"])
    assert res.exit_code == 1
    assert "cannot reach the Ray GCS at 127.0.0.1:" in res.stderr
    assert "Traceback" not in res.stderr


def test_build_cache_is_listed_and_purged(tmp_path: Path) -> None:
    """`<rtenv home>/build/last` (the last zip of each pushed source) is shown and cleaned."""
    from rtenv_cli.core.run import publish_local
    from rtenv_cli.core.transport.local_store import LocalStoreTarget

    target = LocalStoreTarget()
    for name in ("one", "two"):
        src = tmp_path / name
        src.mkdir()
        (src / "main.py").write_text(f"NAME = {name!r}\n" * 100)
        publish_local({"working_dir": name}, tmp_path, target)
    last = Path(os.environ["RTENV_HOME"]) / "build" / "last"
    assert len(list(last.glob("*.zip"))) == 2
    listing = run_cli(["cache", "ls", "--format", "json"]).json
    cached = [e for e in listing["entries"] if e["kind"] == "build-cache"]
    assert len(cached) == 2
    assert all(e["size_bytes"] > 0 for e in cached)
    only = run_cli(["cache", "ls", "--kind", "build-cache", "--format", "json"]).json
    assert len(only["entries"]) == 2
    res = run_cli(["cache", "purge", "--yes", "--format", "json"])
    assert res.exit_code == 0
    assert sum(e["kind"] == "build-cache" for e in res.json["removed"]) == 2
    assert list(last.iterdir()) == []
    again = run_cli(["cache", "ls", "--format", "json"]).json
    assert not [e for e in again["entries"] if e["kind"] == "build-cache"]


def test_build_cache_goes_least_recently_used_first(tmp_path: Path) -> None:
    from rtenv_cli.core.run import publish_local
    from rtenv_cli.core.transport.local_store import LocalStoreTarget

    target = LocalStoreTarget()
    last = Path(os.environ["RTENV_HOME"]) / "build" / "last"
    from rtenv_cli.core.packaging import zipreuse

    for name in ("old", "new"):
        src = tmp_path / name
        src.mkdir()
        (src / "main.py").write_bytes(os.urandom(20_000))
        publish_local({"working_dir": name}, tmp_path, target)
        zipreuse.wait_remembered()  # its sidecar is filed by a thread
        if name == "old":  # the first source's slot was last used long ago
            for path in last.iterdir():
                os.utime(path, (time.time() - 7200, time.time() - 7200))
    res = run_cli(["cache", "gc", "--kind", "build-cache", "--older-than", "1h", "--yes",
                   "--format", "json"])
    assert res.exit_code == 0
    assert len(res.json["removed"]) == 1
    assert len(list(last.glob("*.zip"))) == 1


@pytest.mark.ray
def test_a_gcs_address_without_the_ray_package_says_so(ray_cluster, tmp_path: Path) -> None:
    """The driver that scans the nodes needs `ray`: a Python without it (here, one whose `ray`
    fails to import as a missing package does) is told so, not asked whether the cluster is up."""
    from tests.support.cli import run_process

    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n")
    root = Path(__file__).resolve().parents[2]
    res = run_process(["cache", "ls", "--address", ray_cluster.address],
                      env={"PYTHONPATH": os.pathsep.join([str(shadow.parent), str(root)])})
    assert res.exit_code != 0
    assert "the `ray` package is not installed" in res.stderr, res.stderr
    assert "pip install 'ray[default]" in res.stderr
    assert "reachable" not in res.stderr


def test_pinned_uploads_are_shown_with_the_time_they_have_left(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("X = 1\n")
    pushed = run_cli(["push", str(tmp_path / "src")])  # the embedded store pins what it takes
    assert pushed.exit_code == 0, pushed.stderr
    listing = run_cli(["cache", "ls", "--format", "json"]).json
    [entry] = [e for e in listing["entries"] if e["kind"] == "package"]
    assert entry["refs"] == 0
    assert entry["pinned"] is True
    assert entry["pinned_until"] > time.time()
    assert listing["totals"]["pinned"] == 1
    text = run_cli(["cache", "ls"]).stdout
    assert re.search(r"0 \+pin \d+m", text), text
    assert "pinned: 1 fresh uploads" in text
    gc = run_cli(["cache", "gc"])
    assert "1 referenced or pinned entries kept" in gc.stdout


def test_the_build_cache_keeps_to_the_stores_budget(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.cache import build_cache

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "m.py").write_text(f"X = {name!r}\n" * 2000)
    assert run_cli(["push", str(tmp_path / "a")]).exit_code == 0
    assert len(build_cache.entries()) == 1  # without a budget the last zip is kept
    monkeypatch.setenv("RTENV_MAX_SIZE", "1KB")
    assert run_cli(["push", str(tmp_path / "b")]).exit_code == 0
    assert build_cache.entries() == []  # over the budget: collected after the push
    kept = run_cli(["cache", "ls", "--format", "json"]).json["entries"]
    assert {e["kind"] for e in kept} == {"package"}  # the pinned uploads stay

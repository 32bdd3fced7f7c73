"""The tree path through a dashboard URL (what `ray job submit` uses), on the real 2-node Ray
2.60.0 cluster with rtenv's plugin: the KV is reached through the GCS the dashboard names
(transport/ray_kv.py says why), so what a push through either address stores is one cluster's."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtenv_cli.api import push
from rtenv_cli.core.errors import ConfigError
from rtenv_cli.core.push import tree_path
from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
from rtenv_cli.core.transport.ray_kv import RayKV
from rtenv_cli.core.transport.resolve import resolve_address
from rtenv_cli.core.trees.gc import collect
from tests.core.rayplugin.conftest import PluginCluster
from tests.core.rayplugin.test_trees_ray import make_tree, wait_ready
from tests.support.fake_dashboard import SummaryDashboard, fake_dashboard, raylet, summary
from tests.support.ports import free_port
from tests.support.ray_head import ray_executable

pytestmark = pytest.mark.ray


def test_a_push_through_the_dashboard_takes_the_tree_path_and_an_edit_sends_only_it(
        plugin_cluster: PluginCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = plugin_cluster
    src = make_tree(tmp_path)
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    wait_ready(c)
    first = push(src, address=c.head.dashboard_url, env={}, base_dir=tmp_path)
    assert first.path == "tree", first.notes
    assert not [n for n in first.notes if "zip path" in n], first.notes
    assert set(first.runtime_env) == {"rtenv", "_nsight"}, first.runtime_env
    assert all(p.tree is not None and p.tree["files_sent"] for p in first.packages)
    # one cluster's KV whichever address: a push to the GCS finds everything there
    direct = push(src, address=c.head.address, env={}, base_dir=tmp_path)
    assert direct.runtime_env == first.runtime_env
    assert [p.tree["bytes_sent"] for p in direct.packages if p.tree] == [0, 0]
    edited = tmp_path / "wd" / "pkg" / "sub" / "data.txt"
    edited.write_text("edited through the dashboard\n" * 300)
    again = push(src, address=c.head.dashboard_url, env={}, base_dir=tmp_path)
    assert again.path == "tree", again.notes
    wd, helper = (next(p for p in again.packages if (p.field == "working_dir") is want)
                  for want in (True, False))
    assert wd.tree is not None
    assert helper.tree is not None
    assert (wd.tree["files_sent"], wd.tree["packs_sent"], wd.tree["delta"]) == (1, 1, True)
    # the file's bytes, its pack's index and a manifest of changes: not the tree
    assert wd.tree["bytes_sent"] < edited.stat().st_size + 1500, wd.tree
    assert helper.tree["bytes_sent"] == 0  # unchanged: nothing sent, its packs not re-sent
    # the job, submitted through the same dashboard, runs in the edited tree
    env = again.runtime_env
    job = subprocess.run(
        [ray_executable(), "job", "submit", "--address", c.head.dashboard_url,
         "--runtime-env-json", json.dumps(env), "--", "python", "-c",
         "import hashlib, helper; print('seen', helper.NAME, hashlib.sha256(open("
         "'pkg/sub/data.txt', 'rb').read()).hexdigest()[:16])"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")},
             **c.head.client_env()}, capture_output=True, text=True, timeout=300, check=False)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:] + c.setup_logs()[-3000:]
    want = hashlib.sha256(edited.read_bytes()).hexdigest()[:16]
    assert f"seen helper v1 {want}" in job.stdout
    # gc through the dashboard sees what the pushes stored: past the grace period, every one
    # of their manifests goes unless a node still holds its tree
    ours = {u.removeprefix("rtenv-tree://") for u in
            [*first.runtime_env["rtenv"]["py_modules"], first.runtime_env["rtenv"]["working_dir"],
             env["rtenv"]["working_dir"]]}
    kv = RayKV.of_address(resolve_address(c.head.dashboard_url, {}), env={})
    try:
        assert kv.address == c.head.address
        plan = collect(kv, grace_s=0, dry_run=True)
    finally:
        kv.close()
    assert ours <= set(plan.manifests_removed) | set(plan.held), plan
    assert ours & set(plan.manifests_removed)


@pytest.fixture
def dashboard() -> Iterator[str]:
    with fake_dashboard() as url:
        yield url


def test_a_dashboard_whose_gcs_does_not_answer_or_is_another_clusters_keeps_the_zip_path(
        plugin_cluster: PluginCluster, dashboard: str) -> None:
    wait_ready(plugin_cluster)
    real = plugin_cluster.head.gcs_port
    for flags, words in [
            # only the dashboard is exposed: its cluster's GCS port answers nothing here
            (f"--gcs-address=10.0.0.9:{free_port()} --cluster-id=ab12", "does not answer here"),
            # a port-forwarded dashboard beside another cluster's GCS on that port
            (f"--gcs-address=10.0.0.9:{real} --cluster-id=ab12", "another cluster answers")]:
        SummaryDashboard.reply = summary(raylet(flags))
        target = RayDashboardTarget(dashboard, env={})
        kv, why, guarded = tree_path(target, "auto")
        assert (kv, guarded) == (None, False)
        assert why is not None
        assert why.startswith("zip path: the tree path needs the cluster's GCS: "), why
        assert words in why
        assert "10.0.0.9" in why  # how the cluster itself reaches it
        with pytest.raises(ConfigError, match=words) as refused:
            tree_path(target, "tree")
        assert "--address" in (refused.value.hint or "")

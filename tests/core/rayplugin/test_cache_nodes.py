"""`rtenv cache ls|gc|purge --address` on the 2-node cluster with rtenv's plugin: each node's rtenv
store is listed beside Ray's caches, and an environment a live actor holds survives a purge until
Ray releases it (`delete_uri`)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from rtenv_cli.core.cache.ray_nodes import clean_ray_nodes, list_ray_nodes
from rtenv_cli.core.store.store import Store
from tests.core.rayplugin.conftest import PluginCluster
from tests.core.rayplugin.test_plugin_ray import PROBE
from tests.support.wait import until

pytestmark = pytest.mark.ray

LABEL = "six==1.13.0"  # this test's own environment
ACTOR = '''
@ray.remote(num_cpus=0.1)
class Holder:
    def six(self):
        import six
        return six.__version__
'''


def _worker_refs(c: PluginCluster) -> dict[str, int]:
    """The worker node's rtenv store as its index has it: label -> references."""
    store = Store(c.worker_home / "store", recover=False)  # read only: the node owns it
    try:
        return {e.label: e.refs for e in store.index.all() if (store.root / e.path).exists()}
    finally:
        store.close()


def _labels(listing_nodes: tuple, node_id: str) -> dict[str, int]:
    node = next(n for n in listing_nodes if n["node_id"] == node_id)
    return {e["label"]: e["refs"] for e in node["rtenv"]["entries"]}


def test_cache_ls_gc_purge_address_see_both_nodes_and_spare_a_live_actors_env(
        plugin_cluster: PluginCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    c = plugin_cluster
    for key, value in c.head.client_env().items():
        monkeypatch.setenv(key, value)
    nodes = [c.head_node_id, c.worker.node_id]
    # a task per node builds the env there; a detached actor on the worker node keeps it in use
    proc = c.head.run_driver(PROBE + ACTOR + textwrap.dedent(f'''
        env = {{"rtenv": {{"pip": [{LABEL!r}]}}}}
        ray.get([probe.options(runtime_env=env, scheduling_strategy=On(n, soft=False)).remote()
                 for n in {nodes!r}])
        h = Holder.options(name="rtenv-holder", namespace="rtenv-test", lifetime="detached",
                           runtime_env=env,
                           scheduling_strategy=On({c.worker.node_id!r}, soft=False)).remote()
        print(json.dumps(ray.get(h.six.remote())))
    '''), timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == "1.13.0"
    try:
        listing = list_ray_nodes(c.head.dashboard_url)
        assert not listing.errors
        roots = {n["node_id"]: n["rtenv"]["root"] for n in listing.nodes}
        assert roots == {c.head_node_id: str(c.head_home / "store"),
                         c.worker.node_id: str(c.worker_home / "store")}
        for node_id in nodes:
            assert LABEL in _labels(listing.nodes, node_id)
        assert _labels(listing.nodes, c.worker.node_id)[LABEL] >= 1  # the actor's
        text = subprocess.run([sys.executable, "-m", "rtenv_cli", "cache", "ls", "--address",
                               c.head.dashboard_url], capture_output=True, text=True,
                              timeout=300, check=False)
        assert text.returncode == 0, text.stderr
        assert text.stdout.count("rtenv's plugin") == 2
        assert LABEL in text.stdout

        # purge: the worker node's env is held by the live actor and stays
        purged = clean_ray_nodes(c.head.dashboard_url, dry_run=False,
                                 rtenv_gc={"purge": True, "kinds": ["pip"]})
        gone = {n["node_id"]: [e.label for e in r.removed] for n, r in purged.rtenv_gc()}
        assert LABEL not in gone[c.worker.node_id]
        # and it is still there: read from the worker node's store itself (a scan job costs
        # ~6 s; the listing above already shows the store as the scan reports it)
        assert _worker_refs(c).get(LABEL, 0) >= 1
    finally:
        kill = c.head.run_driver(textwrap.dedent('''
            import ray
            ray.init(log_to_driver=False)
            ray.kill(ray.get_actor("rtenv-holder", namespace="rtenv-test"))
        '''), timeout=120)
        assert kill.returncode == 0, kill.stderr[-2000:]

    # the actor is gone: Ray releases the URI (delete_uri), and gc removes the env. Polled on
    # the worker node's store, whose index the scans report (a scan job per poll cost ~6 s)
    until(lambda: not _worker_refs(c).get(LABEL), what="delete_uri to release rtenv's reference")
    cli = subprocess.run([sys.executable, "-m", "rtenv_cli", "cache", "gc", "--address",
                          c.head.dashboard_url, "--keep-storage", "0", "--kind", "pip", "--yes",
                          "--format", "json"], capture_output=True, text=True, timeout=300,
                         check=False)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    report = json.loads(cli.stdout)
    removed = {r["node_id"]: [e["label"] for e in r["removed"]] for r in report["rtenv"]}
    assert LABEL in removed[c.worker.node_id]
    assert LABEL not in _labels(list_ray_nodes(c.head.dashboard_url).nodes, c.worker.node_id)

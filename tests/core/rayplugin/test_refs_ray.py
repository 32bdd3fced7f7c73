"""The plugin's references follow the node's processes, not Ray's URI cache (issue 23 item 6).

A node whose `ray start` left Ray's URI cache for the plugin at its default (10 GB, e.g. a
KubeRay spec without RAY_RUNTIME_ENV_RTENV_CACHE_SIZE_GB=0) keeps every unused URI cached and
never calls `delete_uri`: before leases, rtenv's reference stayed at 1 after every job ended and
`cache purge --address` removed nothing. Now the reference is a lease that lapses once no
process uses the environment; an environment a live actor uses is kept by purge; and a job that
reuses a purged environment Ray still caches gets it built again, not an error.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtenv_cli.core.rayplugin import schema
from rtenv_cli.core.store.store import Store
from rtenv_cli.core.store.users import in_use
from tests.core.rayplugin.conftest import plugin_env
from tests.core.rayplugin.test_plugin_ray import PROBE
from tests.support.ray_head import RayHead
from tests.support.wait import until

pytestmark = pytest.mark.ray

DONE, KEPT = "six==1.11.0", "six==1.12.0"  # this test's own environments
ACTOR = '''
@ray.remote(num_cpus=0.1)
class Holder:
    def six(self):
        import six
        return six.__version__
'''


@pytest.fixture(scope="module")
def cached_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RayHead, Path]]:
    """One node with the plugin, Ray's URI cache for it left at Ray's default, a 4 s lease."""
    home = tmp_path_factory.mktemp("rtenv-refs") / "home"
    env = {k: v for k, v in plugin_env(home).items() if k != schema.CACHE_SIZE_ENV}
    head = RayHead(env={**env, schema.LEASE_ENV: "4s"}).start()
    try:
        yield head, home
    finally:
        head.stop()


def _entries(home: Path) -> dict[str, tuple[int, str]]:
    """label -> (references, the entry's directory) as the node's store index has them."""
    store = Store(home / "store", recover=False)  # read only: the node owns it
    try:
        return {e.label: (e.refs, str(store.root / e.path)) for e in store.index.all()
                if (store.root / e.path).exists()}
    finally:
        store.close()


def _cli(head: RayHead, *args: str, address: str | None = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "rtenv_cli", "cache", *args, "--address",
                           address or head.dashboard_url, "--format", "json"], capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_references_end_with_the_workers_and_purge_spares_a_live_actor(
        cached_head: tuple[RayHead, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    head, home = cached_head
    for key, value in head.client_env().items():
        monkeypatch.setenv(key, value)
    # a finished job's task used DONE; a detached actor (a running job's worker) uses KEPT
    proc = head.run_driver(PROBE + ACTOR + textwrap.dedent(f'''
        done = ray.get(probe.options(runtime_env={{"rtenv": {{"pip": [{DONE!r}]}}}}).remote())
        h = Holder.options(name="rtenv-refs", namespace="rtenv-test", lifetime="detached",
                           runtime_env={{"rtenv": {{"pip": [{KEPT!r}]}}}}).remote()
        print(json.dumps([done["six"], ray.get(h.six.remote())]))
    '''), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == ["1.11.0", "1.12.0"]

    # the job ended; once no process uses DONE's venv its lease lapses (Ray never calls
    # delete_uri here: its cache keeps the URI), while the actor keeps KEPT's renewed
    until(lambda: not (in_use([_entries(home)[DONE][1]]) or _entries(home)[DONE][0]),
          what=lambda: f"the reference released: {_entries(home)}", timeout=180)
    listing = _cli(head, "ls", address=head.address)  # the GCS address: tree refs too
    assert listing["tree_refs"] == []  # this node materialized no tree
    (node,) = listing["nodes"]
    refs = {e["label"]: e["refs"] for e in node["rtenv"]["entries"]}
    assert refs[DONE] == 0
    assert refs[KEPT] >= 1

    purged = _cli(head, "purge", "--yes", "--kind", "pip")
    (report,) = purged["rtenv"]
    removed = [e["label"] for e in report["removed"]]
    assert DONE in removed
    assert KEPT not in removed
    assert DONE not in _entries(home)
    assert KEPT in _entries(home)

    # Ray still caches DONE's URI: a new job with it gets the environment built again
    again = head.run_driver(PROBE + textwrap.dedent(f'''
        print(json.dumps(ray.get(probe.options(
            runtime_env={{"rtenv": {{"pip": [{DONE!r}]}}}}).remote())["six"]))
        ray.kill(ray.get_actor("rtenv-refs", namespace="rtenv-test"))
    '''), timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1]) == "1.11.0"

"""The watch's tree path (watch/publish.py TreePublisher) on an in-memory KV: each save's
manifest is the one a fresh `rtenv push` makes, sent as the change only (the real cluster:
tests/core/rayplugin/test_trees_ray.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.packaging.hashing import digest_entries
from rtenv_cli.core.packaging.walk import scan_package
from rtenv_cli.core.trees.manifest import decode
from rtenv_cli.core.trees.publish import publish_scan
from rtenv_cli.core.watch.publish import TreePublisher
from rtenv_cli.core.watch.snapshot import Snapshot
from rtenv_cli.core.watch.sources import Source
from tests.core.rayplugin.test_trees_ray import make_tree
from tests.core.trees.test_trees_unit import MemoryKV


def fresh(kv: MemoryKV, root: Path, kind: str) -> str:
    """The manifest id of a fresh one-shot push of `root`."""
    scan = scan_package(root, kind=kind, env={})
    return publish_scan(kv, scan, digest_entries(scan.entries, use_cache=False), kind).uri


def test_each_save_is_a_delta_of_the_manifest_a_fresh_push_makes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    make_tree(tmp_path)
    wd, mod = tmp_path / "wd", tmp_path / "helper"
    kv = MemoryKV()
    pub = TreePublisher(kv)  # type: ignore[arg-type]
    sources = [Source("working_dir", Snapshot(wd)),
               Source("py_modules[0]", Snapshot(mod, "py_module"))]
    for src in sources:
        src.snap.full_scan()
        pub.push(src)
    assert [s.tree_uri for s in sources] == [fresh(MemoryKV(), wd, "working_dir"),
                                              fresh(MemoryKV(), mod, "py_module")]
    saves = [
        (wd / "main.py", lambda: (wd / "main.py").write_text("print('edited')\n")),
        (wd / "pkg" / "sub" / "data.txt", (wd / "pkg" / "sub" / "data.txt").unlink),
        (wd / "new.py", lambda: (wd / "new.py").write_text("NEW = 1\n")),
    ]
    for path, save in saves:
        save()
        sources[0].snap.update([str(path)])
        sent = pub.push(sources[0])
        uri = sources[0].tree_uri
        assert uri == fresh(MemoryKV(), wd, "working_dir"), path
        assert sent < 1500, (path, sent)  # the file's bytes and a manifest of changes
        assert "base" in decode(kv.data["m:" + uri.removeprefix("rtenv-tree://")]), path
    pub.close(sources)
    # the watch's last manifest is in the home: the next `rtenv push` is a delta against it
    (wd / "new.py").write_text("NEW = 2\n")
    scan = scan_package(wd, kind="working_dir", env={})
    again = publish_scan(kv, scan, digest_entries(scan.entries, use_cache=False), "working_dir")
    assert again.delta, again
    assert again.files_sent == 1, again

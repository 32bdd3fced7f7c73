"""A one-shot push's base from the home (trees/publish.py: `trees/base/`, `trees/have/`), on an
in-memory KV: a re-push compares the tree with the last manifest's records and looks up only
what changed, and still makes the manifest a fresh push makes, whatever the home holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.packaging.hashing import digest_entries
from rtenv_cli.core.packaging.walk import scan_package
from rtenv_cli.core.trees.manifest import apply, decode
from rtenv_cli.core.trees.publish import PublishResult, publish_scan
from tests.core.trees.test_trees_unit import MemoryKV, tree


def push(kv: MemoryKV, root: Path, home: Path, monkeypatch: pytest.MonkeyPatch
         ) -> PublishResult:
    monkeypatch.setenv("RTENV_HOME", str(home))
    scan = scan_package(root, kind="working_dir", env={})
    return publish_scan(kv, scan, digest_entries(scan.entries, use_cache=False), "working_dir")


def full(kv: MemoryKV, ident: str) -> dict[str, tuple[int, int, str]]:
    """The tree manifest `ident` names in `kv`, its chain of deltas applied."""
    doc = decode(kv.data["m:" + ident])
    base = None
    if "base" in doc:
        chain = full(kv, doc["base"])
        from rtenv_cli.core.trees.manifest import FileEntry, Manifest

        base = Manifest(doc["kind"], {p: FileEntry(p, m, s, d, "", 0)
                                      for p, (m, s, d) in chain.items()})
    m = apply(doc, base)
    assert m.id == ident
    return {p: (f.mode, f.size, f.digest) for p, f in m.files.items()}


def edit(src: Path) -> None:
    (src / "a" / "f3.txt").write_text("edited\n")
    (src / "a" / "f4.txt").unlink()
    (src / "a" / "b" / "new.py").write_text("NEW = 1\n")
    (src / "a" / "f5.txt").chmod(0o600)
    (src / "a" / "f6.txt").write_text((src / "a" / "f7.txt").read_text())  # a known content
    (src / "empty2").mkdir()


def test_a_repush_from_the_home_s_base_is_the_manifest_a_fresh_push_makes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kv = MemoryKV()
    src = tree(tmp_path / "src")
    home = tmp_path / "home"
    first = push(kv, src, home, monkeypatch)
    edit(src)
    second = push(kv, src, home, monkeypatch)
    assert second.delta
    assert second.files_sent == 2  # f3 and new.py: f6 now holds a content the cluster has
    doc = decode(kv.data["m:" + second.manifest_id])
    assert doc["base"] == first.manifest_id
    assert doc["del"] == ["a/f4.txt"]
    assert sorted(f[0] for f in doc["files"]) == ["a/b/new.py", "a/f3.txt", "a/f5.txt",
                                                  "a/f6.txt"]
    fresh_kv = MemoryKV()
    fresh = push(fresh_kv, src, tmp_path / "fresh-home", monkeypatch)
    assert second.manifest_id == fresh.manifest_id
    assert not fresh.delta
    assert full(kv, second.manifest_id) == full(fresh_kv, fresh.manifest_id)
    again = push(kv, src, home, monkeypatch)  # nothing changed: nothing sent
    assert (again.manifest_id, again.bytes_sent) == (second.manifest_id, 0)


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign"])
def test_a_torn_or_foreign_base_costs_a_whole_manifest_never_a_wrong_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    kv = MemoryKV()
    src = tree(tmp_path / "src")
    home = tmp_path / "home"
    push(kv, src, home, monkeypatch)
    for f in [*(home / "trees" / "base").iterdir(), *(home / "trees" / "have").iterdir()]:
        raw = f.read_bytes()
        f.write_bytes(raw[:len(raw) // 2] if damage == "truncate" else
                      raw[:-5] + bytes([raw[-5] ^ 1]) + raw[-4:] if damage == "flip" else
                      b"rtenv-cache 9\n" + raw[14:])
    edit(src)
    second = push(kv, src, home, monkeypatch)
    assert not second.delta
    assert second.files_sent == 2  # the cluster's contents learnt again from its indexes
    assert second.manifest_id == push(MemoryKV(), src, tmp_path / "h2", monkeypatch).manifest_id


def test_contents_a_gc_took_are_sent_again(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    kv = MemoryKV()
    src = tree(tmp_path / "src")
    home = tmp_path / "home"
    first = push(kv, src, home, monkeypatch)
    for key in [*kv.keys("p:"), *kv.keys("x:"), *kv.keys("m:")]:  # a purge of the cluster
        kv.delete(key)
    (src / "a" / "f3.txt").write_text("edited\n")
    second = push(kv, src, home, monkeypatch)
    assert second.files_sent == first.files_sent
    assert not second.delta  # its base is gone from the cluster
    assert full(kv, second.manifest_id)["a/f3.txt"][1] == len("edited\n")


def test_a_content_another_home_sent_is_not_sent_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kv = MemoryKV()
    one, two = tree(tmp_path / "one"), tree(tmp_path / "two")
    push(kv, one, tmp_path / "h1", monkeypatch)
    assert push(kv, two, tmp_path / "h2", monkeypatch).files_sent == 0
    (one / "shared.txt").write_text("the same bytes\n")
    push(kv, one, tmp_path / "h1", monkeypatch)
    (two / "copy.txt").write_text("the same bytes\n")
    second = push(kv, two, tmp_path / "h2", monkeypatch)  # h2's merged indexes learn h1's pack
    assert second.files_sent == 0
    assert second.delta


def test_a_watch_s_first_save_is_a_delta_against_the_home_s_base(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.trees.publish import TreeState, files_of_scan, publish_tree

    kv = MemoryKV()
    src = tree(tmp_path / "src")
    first = push(kv, src, tmp_path / "home", monkeypatch)
    (src / "a" / "f3.txt").write_text("edited\n")
    scan = scan_package(src, kind="working_dir", env={})
    files, dirs = files_of_scan(scan, digest_entries(scan.entries, use_cache=False),
                                "working_dir")
    state = TreeState()
    saved = publish_tree(kv, "working_dir", files, dirs, label=str(scan.root), state=state)
    assert saved.delta
    assert decode(kv.data["m:" + saved.manifest_id])["base"] == first.manifest_id
    assert saved.files_sent == 1

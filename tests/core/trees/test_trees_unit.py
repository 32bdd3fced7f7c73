"""The tree format, publish and a node's build, on an in-memory KV (the same calls as RayKV;
tests/core/rayplugin/test_trees_ray.py runs them on a real 2-node Ray cluster)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rtenv_cli.core.errors import ValidationError
from rtenv_cli.core.packaging.hashing import digest_entries
from rtenv_cli.core.packaging.walk import scan_package
from rtenv_cli.core.rayplugin import schema
from rtenv_cli.core.rayplugin.engine import agent_arg
from rtenv_cli.core.trees.gc import collect
from rtenv_cli.core.trees.manifest import SCHEME, apply, decode
from rtenv_cli.core.trees.materialize import NodeTrees
from rtenv_cli.core.trees.publish import publish_scan


class MemoryKV:
    """RayKV's calls over a dict (one namespace)."""

    address = "memory:0"

    def __init__(self, data: dict[str, bytes] | None = None) -> None:
        self.data = {} if data is None else data

    def fork(self) -> MemoryKV:
        return MemoryKV(self.data)

    def close(self) -> None:
        pass

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def multi_get(self, keys: list[str]) -> dict[str, bytes]:
        return {k: self.data[k] for k in keys if k in self.data}

    def put(self, key: str, value: bytes, *, overwrite: bool = True) -> None:
        self.data[key] = bytes(value)

    def exists(self, key: str) -> bool:
        return key in self.data

    def keys(self, prefix: str) -> list[str]:
        return [k for k in self.data if k.startswith(prefix)]

    def delete(self, key: str, *, by_prefix: bool = False) -> int:
        return 1 if self.data.pop(key, None) is not None else 0

    def alive_nodes(self) -> dict[str, str]:
        return {"n1": "127.0.0.1"}


def tree(root: Path) -> Path:
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x.py").write_text("x = 1\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    (root / "empty").mkdir()
    for i in range(30):
        (root / "a" / f"f{i}.txt").write_text(f"{i}\n" * 100)
    return root


def publish(kv: MemoryKV, root: Path, home: Path) -> dict:
    scan = scan_package(root, kind="working_dir", env={})
    return publish_scan(kv, scan, digest_entries(scan.entries, use_cache=False),
                        "working_dir").to_dict()


def listing(root: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for top, dirs, files in os.walk(root):
        for d in dirs:
            p = Path(top) / d
            if not any(p.iterdir()):
                out[str(p.relative_to(root)) + "/"] = None
        for f in files:
            p = Path(top) / f
            out[str(p.relative_to(root))] = (p.stat().st_mode & 0o7777, p.read_bytes())
    return out


def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[MemoryKV, Path, dict, NodeTrees]:
    """A tree published to an empty KV: (the KV, the source, the result, a node)."""
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    kv = MemoryKV()
    src = tree(tmp_path / "src")
    first = publish(kv, src, tmp_path / "home")
    return kv, src, first, NodeTrees(tmp_path / "node", "n1", kv.fork)


def test_an_edit_sends_one_file_and_a_delta_and_the_node_patches_its_spare(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kv, src, first, node = published(tmp_path, monkeypatch)
    assert first["files_sent"] == 32
    assert not first["delta"]
    path, _size, how = node.ensure(first["manifest"])
    assert how == "built"
    assert listing(path) == listing(src)
    (src / "a" / "f3.txt").write_text("edited\n")
    (src / "a" / "f4.txt").unlink()
    second = publish(kv, src, tmp_path / "home")
    assert second["files_sent"] == 1
    assert second["delta"]
    assert second["manifest_bytes"] < 400
    doc = decode(kv.data["m:" + second["manifest"]])
    assert doc["base"] == first["manifest"]
    assert doc["del"] == ["a/f4.txt"]
    node.remove(first["manifest"])  # released: a spare
    path2, _size, how = node.ensure(second["manifest"])
    assert how == "patched"
    assert listing(path2) == listing(src)


def test_a_pack_s_id_names_its_index_and_its_bytes_are_the_contents_it_lists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packs are read into memory and sent from there, not hashed again: the id is the
    sha256 of the index (publish.pack_id), the bytes are the listed contents, in order."""
    import hashlib

    from rtenv_cli.core.trees import publish as pub
    from rtenv_cli.core.trees.manifest import decode_index

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    src = tree(tmp_path / "src")
    for i in range(3):
        (src / "big").mkdir(exist_ok=True)
        (src / "big" / f"b{i}.bin").write_bytes(os.urandom(pub.PACK_BYTES // 2 + i))
    kv = MemoryKV()
    first = publish(kv, src, tmp_path / "home")
    packs = {k.removeprefix("p:"): v for k, v in kv.data.items() if k.startswith("p:")}
    assert len(packs) == first["packs_sent"] > 1
    for pack, blob in packs.items():
        _t, index = decode_index(kv.data[f"x:{pack}"])
        assert pub.pack_id(index) == pack
        assert sum(size for _d, _o, size in index) == len(blob)
        for digest, offset, size in index:
            assert hashlib.sha256(blob[offset:offset + size]).hexdigest() == digest
    path, _size, _how = NodeTrees(tmp_path / "node", "n1", kv.fork).ensure(first["manifest"])
    assert listing(path) == listing(src)


def _scanned(src: Path) -> tuple[object, dict]:
    scan = scan_package(src, kind="working_dir", env={})
    return scan, digest_entries(scan.entries, use_cache=False)


def test_a_file_changed_after_its_hashing_is_not_pushed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its stat is no longer the scan's: ContentChanged, and no manifest names it."""
    from rtenv_cli.core.trees.publish import ContentChanged

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    src = tree(tmp_path / "src")
    scan, digests = _scanned(src)
    target = src / "a" / "f3.txt"
    st = target.stat()
    target.write_text("3\n" * 99 + "x\n")  # the same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    kv = MemoryKV()
    with pytest.raises(ContentChanged) as err:
        publish_scan(kv, scan, digests, "working_dir")
    assert err.value.path == str(target)
    assert not [k for k in kv.data if k.startswith("m:")]


def test_a_racy_file_is_checked_by_its_content(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose ctime is recent is hashed again (a write in the scan's timestamp tick
    keeps the stat): here its mtime was put back after the write, which only the content
    shows. Outside the racy window the stat is trusted, and such a content is refused by the
    node that fetches it (its sha256 checked): a failed build, never a wrong file."""
    from rtenv_cli.core.trees import publish as pub
    from rtenv_cli.core.trees.materialize import TreeError

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    src = tree(tmp_path / "src")
    scan, digests = _scanned(src)
    target = src / "a" / "f3.txt"
    st = target.stat()
    target.write_text("3\n" * 99 + "x\n")
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(pub.ContentChanged):
        publish_scan(MemoryKV(), scan, digests, "working_dir")
    monkeypatch.setattr(pub, "RACY_NS", 0)  # every ctime old enough: the stat trusted
    kv = MemoryKV()
    first = publish_scan(kv, scan, digests, "working_dir").to_dict()
    with pytest.raises(TreeError, match="does not match its digest"):
        NodeTrees(tmp_path / "node", "n1", kv.fork).ensure(first["manifest"])


def test_small_files_go_to_the_cluster_in_puts_of_at_most_pack_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GCS receives each KV put whole and its allocator keeps the buffers it frees
    (publish.PACK_BYTES): a cold push packs small files into puts of at most PACK_BYTES
    (512 KiB); a larger file goes alone."""
    from rtenv_cli.core.trees.publish import PACK_BYTES

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    src = tmp_path / "src"
    src.mkdir()
    for i in range(48):
        (src / f"f{i}.bin").write_bytes(os.urandom(PACK_BYTES // 12))
    (src / "big.bin").write_bytes(os.urandom(PACK_BYTES + 1))
    kv = MemoryKV()
    publish(kv, src, tmp_path / "home")
    packs = sorted(len(v) for k, v in kv.data.items() if k.startswith("p:"))
    assert packs[-1] == PACK_BYTES + 1
    assert len(packs) > 2
    assert max(packs[:-1]) <= PACK_BYTES
    assert sum(packs) == 48 * (PACK_BYTES // 12) + PACK_BYTES + 1


class OnePutKV(MemoryKV):
    """A MemoryKV that records the threads its puts come from and refuses to fork."""

    def __init__(self) -> None:
        super().__init__()
        self.put_threads: set[int] = set()

    def fork(self) -> MemoryKV:
        raise AssertionError("a push puts on its one connection")

    def put(self, key: str, value: bytes, *, overwrite: bool = True) -> None:
        import threading

        self.put_threads.add(threading.get_ident())
        super().put(key, value, overwrite=overwrite)


def test_packs_are_put_one_at_a_time_and_a_change_in_a_later_one_fails_the_push(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GCS holds each put in flight whole (publish.PACK_BYTES): the packs go one at a time
    on the push's own connection. A file changed after its hashing, in a later pack, fails the
    push with no manifest (the packs before it went; the gc collects them)."""
    import threading

    from rtenv_cli.core.trees import publish as pub

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    src = tmp_path / "src"
    src.mkdir()
    for i in range(24):
        (src / f"f{i:02}.bin").write_bytes(os.urandom(pub.PACK_BYTES // 6))
    kv = OnePutKV()
    first = publish(kv, src, tmp_path / "home")
    assert first["packs_sent"] >= 4  # 24 files of a sixth of a pack each
    assert kv.put_threads == {threading.get_ident()}
    for i in range(24):  # new contents, one of them changed after the scan, in the last pack
        (src / f"f{i:02}.bin").write_bytes(os.urandom(pub.PACK_BYTES // 6))
    scan, digests = _scanned(src)
    last = src / "f23.bin"
    st = last.stat()
    last.write_bytes(os.urandom(st.st_size))
    os.utime(last, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    kv2 = OnePutKV()
    with pytest.raises(pub.ContentChanged) as err:
        publish_scan(kv2, scan, digests, "working_dir")
    assert err.value.path == str(last)
    assert not [k for k in kv2.data if k.startswith("m:")]
    assert [k for k in kv2.data if k.startswith("p:")]  # the packs before it went


def test_a_spare_a_worker_wrote_into_is_not_patched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kv, src, first, node = published(tmp_path, monkeypatch)
    path, _size, _how = node.ensure(first["manifest"])
    (path / "a" / "f1.txt").write_text("a worker was here\n")
    (path / "stray.txt").write_text("and here\n")
    node.remove(first["manifest"])
    (src / "a" / "f2.txt").write_text("edited\n")
    second = publish(kv, src, tmp_path / "home")
    path2, _size, how = node.ensure(second["manifest"])
    assert how == "built"
    assert listing(path2) == listing(src)
    for obj in (tmp_path / "node" / "objects").glob("*/*"):
        assert b"worker" not in obj.read_bytes()


def test_gc_keeps_held_and_recent_trees_and_their_chain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    kv = MemoryKV()
    src = tree(tmp_path / "src")
    first = publish(kv, src, tmp_path / "home")
    (src / "run.sh").write_text("#!/bin/sh\necho 2\n")
    second = publish(kv, src, tmp_path / "home")
    assert not collect(kv).manifests_removed  # both within the grace period
    kv.put(f"r:{second['manifest']}:n1", b"1")  # node n1 holds the second: its base stays
    done = collect(kv, grace_s=0)
    assert not done.manifests_removed
    kv.delete(f"r:{second['manifest']}:n1")
    done = collect(kv, grace_s=0)
    assert set(done.manifests_removed) == {first["manifest"], second["manifest"]}
    assert not kv.keys("m:")
    assert not kv.keys("p:")
    assert not kv.keys("x:")


def test_the_field_takes_tree_uris_and_refuses_ray_s_working_dir_beside_them() -> None:
    uri = SCHEME + "a" * 64
    spec = schema.parse({"working_dir": uri, "py_modules": [uri]})
    assert spec.trees == (uri, uri)
    assert spec.kind is None
    with pytest.raises(ValidationError, match="rtenv tree URI"):
        schema.parse({"working_dir": "gcs://_ray_pkg_x.zip"})
    with pytest.raises(ValidationError, match="both `working_dir`"):
        schema.parse({"working_dir": uri}, {"working_dir": "/x", "rtenv": {}})


def test_the_agent_s_arguments() -> None:
    argv = ["agent", "--node-id", "abc", "--gcs-address=127.0.0.1:6379"]
    assert agent_arg("--node-id", argv) == "abc"
    assert agent_arg("--gcs-address", argv) == "127.0.0.1:6379"
    assert agent_arg("--missing", argv) is None


def test_a_delta_applies_to_its_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    kv = MemoryKV()
    src = tree(tmp_path / "src")
    first = publish(kv, src, tmp_path / "home")
    (src / "new.txt").write_text("new\n")
    second = publish(kv, src, tmp_path / "home")
    base = apply(decode(kv.data["m:" + first["manifest"]]), None)
    full = apply(decode(kv.data["m:" + second["manifest"]]), base)
    assert full.id == second["manifest"]


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a/../../x", "a//b", "./a"])
def test_a_manifest_naming_a_path_outside_its_tree_is_refused(bad: str) -> None:
    from rtenv_cli.core.trees.manifest import TreeFormatError

    doc = {"v": 1, "kind": "working_dir", "dirs": {}, "packs": ["p"],
           "files": [[bad, 0o644, 1, "0" * 64, 0, 0]]}
    with pytest.raises(TreeFormatError, match="outside its tree"):
        apply(doc, None)


def test_a_manifest_with_a_digest_that_is_not_a_sha256_is_refused() -> None:
    from rtenv_cli.core.trees.manifest import TreeFormatError

    doc = {"v": 1, "kind": "working_dir", "dirs": {}, "packs": ["p"],
           "files": [["a.txt", 0o644, 1, "../../../etc/x" + "0" * 50, 0, 0]]}
    with pytest.raises(TreeFormatError, match="digest"):
        apply(doc, None)


def test_push_leaves_a_working_dir_requirements_file_of_the_rtenv_field_to_the_node(
        tmp_path: Path) -> None:
    from rtenv_cli.core.rayplugin.convert import inline_files

    value = "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/requirements.txt"
    env, done = inline_files({"rtenv": {"pip": value}}, tmp_path)
    assert env == {"rtenv": {"pip": value}}
    assert done == []


def test_a_new_node_process_removes_what_a_dead_one_left_and_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a process killed mid-work leaves (its pid in the names) goes when the next one
    opens the trees; a live process's work and the ready trees stay."""
    import subprocess
    import sys

    kv, _src, first, node = published(tmp_path, monkeypatch)
    ready, _size, _how = node.ensure(first["manifest"])
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()  # a pid that was a process of this machine, and is no more
    live = os.getpid()
    root = tmp_path / "node"
    made = {}
    for name, pid in (("dead", dead.pid), ("live", live)):
        made[name] = [root / "t" / "old-node" / f".tmp-{first['manifest']}-{pid}-7",
                      root / "spares" / "n1" / f"{first['manifest']}-{pid}",
                      root / "trash" / f"x-{pid}-7"]
        for d in made[name]:
            (d / "sub").mkdir(parents=True)
            (d / "sub" / "f.py").write_text("partial\n")
        obj = root / "objects" / "ab" / f".{'ab' * 32}.{pid}.7"
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(b"half")
        made[name].append(obj)
    again = NodeTrees(root, "n2", kv.fork)
    again.recovery.join()
    assert not any(p.exists() for p in made["dead"])
    assert all(p.exists() for p in made["live"])
    assert ready.is_dir()
    assert again.ensure(first["manifest"])[2] == "built"  # another node's own tree


def test_recheck_reads_the_announcements_only_when_the_alive_nodes_changed() -> None:
    from rtenv_cli.core.trees.cluster import readiness, recheck

    class Nodes(MemoryKV):
        def __init__(self) -> None:
            super().__init__({"n:a": b"{}"})
            self.alive = {"a": "10.0.0.1"}
            self.reads = 0

        def alive_nodes(self) -> dict[str, str]:
            return dict(self.alive)

        def multi_get(self, keys: list[str]) -> dict[str, bytes]:
            self.reads += 1
            return super().multi_get(keys)

    kv = Nodes()
    first = readiness(kv)
    assert first.ok
    assert recheck(kv, first) is None  # the same nodes: one listing, no announcement read
    assert kv.reads == 1
    kv.alive["b"] = "10.0.0.2"  # joined without the plugin
    joined = recheck(kv, first)
    assert joined is not None
    assert joined.missing == ("b",)
    assert "1 of 2 nodes do not load rtenv's plugin: b (10.0.0.2)" in joined.why_not()
    kv.data["n:b"] = b"{}"  # its plugin announced itself: read again, as `joined` missed one
    again = recheck(kv, joined)
    assert again is not None
    assert again.ok
    del kv.alive["b"]
    assert recheck(kv, again) == first


class Starting(MemoryKV):
    """A cluster that changes as time passes: `script` maps the clock's seconds to the alive
    nodes (id -> start time, s) and the announcements from then on; `sleep` moves the clock."""

    def __init__(self, script: dict[float, tuple[dict[str, float], set[str]]]) -> None:
        super().__init__()
        self.script, self.now, self.polls = script, 1000.0, 0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def clock(self) -> float:
        return self.now

    def _state(self) -> tuple[dict[str, float], set[str]]:
        return self.script[max(t for t in self.script if t <= self.now - 1000)]

    def alive_node_starts(self) -> dict[str, tuple[str, int]]:
        self.polls += 1
        return {n: ("10.0.0.1", int(s * 1000)) for n, s in self._state()[0].items()}

    def multi_get(self, keys: list[str]) -> dict[str, bytes]:
        return {k: b"{}" for k in keys if k.removeprefix("n:") in self._state()[1]}


@pytest.mark.parametrize(("script", "path", "waited"), [
    # `ray start` just returned: no node yet, then the head, then its plugin's announcement
    ({0: ({}, set()), 0.5: ({"h": 1000.4}, set()), 1.1: ({"h": 1000.4}, {"h"})}, "ok", 1.2),
    # a node long up without the plugin: the zip path at once
    ({0: ({"h": 100.0}, set())}, "missing", 0.0),
    # a node that started 1 s ago and never announces: waited for until it is STARTING_S old
    ({0: ({"h": 999.0}, set())}, "missing", 4.0),
    # no node at all: waited for STARTING_S, then the zip path with the reason
    ({0: ({}, set())}, "no node", 5.0),
])
def test_a_push_right_after_ray_start_waits_for_the_node_and_its_plugin(
        script: dict[float, tuple[dict[str, float], set[str]]], path: str,
        waited: float) -> None:
    """cluster.settled: the readiness a push decides on, once no node is still starting."""
    from rtenv_cli.core.trees.cluster import STARTING_S, settled

    assert STARTING_S == 5.0  # the waits below are in its terms
    kv = Starting(script)
    ready = settled(kv, sleep=kv.sleep, clock=kv.clock)  # type: ignore[arg-type]
    assert {"ok": ready.ok, "missing": ready.missing == ("h",),
            "no node": not ready.nodes}[path], ready
    assert kv.now - 1000 == pytest.approx(waited, abs=0.25)

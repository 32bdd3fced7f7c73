"""Every route that publishes a Ray package serves the same bytes for the same URI, and Ray's own
code accepts them: `rtenv push` to the embedded store, to a real `rtenv agent`, to file:// and
to a real Ray head, `rtenv push --watch` after an edit (delta to the store and the agent, whole
zips to file://) and `rtenv run`'s package. The trees cover what Ray hashes but does not zip
(folders whose files are all ignored), empty directories, in-tree symlinks and a py_module
outside the working_dir."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests  # noqa: TID253 - tests are not on the CLI's startup path
from ray._private.ray_constants import get_runtime_env_default_excludes
from ray._private.runtime_env.packaging import (
    create_package,
    get_uri_for_directory,
    unzip_package,
)

from rtenv_cli.core.push import push
from rtenv_cli.core.run import publish_local
from rtenv_cli.core.transport.agent_protocol import download_capability
from rtenv_cli.core.transport.file_target import FileTarget
from rtenv_cli.core.transport.local_store import LocalStoreTarget
from rtenv_cli.core.transport.resolve import resolve_target
from tests.core.watch.helpers import Running
from tests.support.agent import agent_process


def _w(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _gitignored(m: Path) -> list[str]:
    _w(m / ".gitignore", "/data/\n__pycache__/\n")
    _w(m / "data" / "x", "big data\n")
    _w(m / "pkg" / "__pycache__" / "mod.cpython-311.pyc", "bytecode")
    _w(m / "pkg" / "mod.py", "V = 1\n")
    return []


def _excluded_dir(m: Path) -> list[str]:
    _w(m / "tests" / "test_a.py", "def test(): pass\n")
    _w(m / "tests" / "deep" / "t.py", "pass\n")
    return ["tests/"]


def _excluded_glob(m: Path) -> list[str]:
    (m / "assets").mkdir()
    (m / "assets" / "w.bin").write_bytes(os.urandom(5000))
    (m / "assets" / "sub").mkdir()
    (m / "assets" / "sub" / "v.bin").write_bytes(os.urandom(300))
    _w(m / "cfg" / "a.yaml", "a: 1\n" * 200)
    return ["*.bin"]


def _empty_dirs_and_links(m: Path) -> list[str]:
    (m / "empty").mkdir()
    (m / "a" / "b" / "c").mkdir(parents=True)
    _w(m / "real" / "impl.py", "IMPL = 2\n" * 100)
    (m / "linked_file.py").symlink_to("real/impl.py")
    (m / "linked_dir").symlink_to("real")
    (m / "rand.dat").write_bytes(os.urandom(20_000))  # stored, not deflated
    (m / "tool.sh").write_text("#!/bin/sh\n")
    (m / "tool.sh").chmod(0o755)
    return []


TREES: dict[str, Callable[[Path], list[str]]] = {
    "gitignored": _gitignored, "excluded_dir": _excluded_dir, "excluded_glob": _excluded_glob,
    "empty_dirs_and_links": _empty_dirs_and_links}


def make_project(base: Path, tree: str, marker: str = "") -> Path:
    """base/m (the working_dir, with re.yaml) and base/libs/helper (a py_module outside it)."""
    m = base / "m"
    m.mkdir(parents=True)
    _w(m / "main.py", f"print('main {marker}')\n")
    excludes = TREES[tree](m)
    helper = base / "libs" / "helper"
    _w(helper / "__init__.py", f"H = {marker!r}\n")
    _w(helper / ".gitignore", "cache/\n")
    _w(helper / "cache" / "c.txt", "cached\n")  # hashed by name, not zipped
    (helper / "empty").mkdir()
    spec = {"working_dir": ".", "py_modules": ["../libs/helper"], "excludes": excludes}
    (m / "re.yaml").write_text(json.dumps(spec))
    return m


def _names(uris: dict[str, str]) -> dict[str, str]:
    return {k: v.removeprefix("gcs://") for k, v in uris.items()}


def _push(m: Path, target: Any) -> dict[str, str]:
    res = push(m / "re.yaml", target=target, cwd=m)
    return {p.field: p.ray_uri for p in res.packages}


def _tree_of(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(path))
            st = p.lstat()
            out[rel] = ("dir", st.st_mode) if p.is_dir() else (p.read_bytes(), st.st_mode)
    return out


def _ray_accepts(tmp: Path, source: Path, kind: str, excludes: list[str], *, uri: str,
                 data: bytes, remote: bool = False) -> None:
    """Ray's URI of `source` is `uri`, and Ray's unzip of `data` is the tree of Ray's own zip."""
    ex = (get_runtime_env_default_excludes() if kind == "working_dir" else []) + excludes
    assert get_uri_for_directory(str(source), True, ex) == uri
    work = tmp / f"ray-check-{len(list(tmp.iterdir()))}"
    work.mkdir()
    theirs = work / "ray.zip"
    create_package(str(source), theirs, include_gitignore=True,
                   include_parent_dir=kind == "py_module", excludes=ex)
    ours = work / "ours.zip"
    ours.write_bytes(data)
    unzip_package(str(theirs), str(work / "theirs"), remove_top_level_directory=False,
                  unlink_zip=False)
    unzip_package(str(ours), str(work / "ours"), remove_top_level_directory=remote,
                  unlink_zip=False)
    assert _tree_of(work / "ours") == _tree_of(work / "theirs")


def _remote_of(ray_layout: bytes, tmp: Path) -> bytes:
    """What the agent serves Ray's nodes for a package (its remote rendition)."""
    from rtenv_cli.core.store.zips import prefixed_copy

    src, out = tmp / "src.zip", tmp / "remote.zip"
    src.write_bytes(ray_layout)
    prefixed_copy(src, out, "pkg/")
    return out.read_bytes()


def _edit(m: Path, marker: str = "") -> None:
    _w(m / "main.py", f"print('edited {marker}')\n")


@pytest.mark.parametrize("tree", sorted(TREES))
def test_every_route_serves_the_same_bytes_and_ray_accepts_them(
        tmp_path: Path, tree: str) -> None:
    m = make_project(tmp_path / "proj", tree)
    excludes = json.loads((m / "re.yaml").read_text())["excludes"]
    with agent_process(tmp_path / "agent-store") as agent, \
            agent_process(tmp_path / "watch-agent-store") as wagent:
        agent_target = resolve_target(None, agent.url)
        watch_store = LocalStoreTarget(tmp_path / "watch-store")
        watch_file = FileTarget((tmp_path / "watch-shared").as_uri())
        watch_agent = resolve_target(None, wagent.url)
        # push --watch: initial push, then an edit each session re-pushes
        with Running(m / "re.yaml", watch_store, base_dir=m) as ws, \
                Running(m / "re.yaml", watch_file, base_dir=m) as wf, \
                Running(m / "re.yaml", watch_agent, base_dir=m) as wa:
            _edit(m)
            watched = [r.next_event(1) for r in (ws, wf, wa)]
        assert len({json.dumps(dict(ev.uris), sort_keys=True) for ev in watched}) == 1
        uris = dict(watched[0].uris)
        assert set(uris) == {"working_dir", "py_modules[0]"}

        store = LocalStoreTarget(tmp_path / "store")
        assert _push(m, store) == uris
        assert _push(m, agent_target) == uris
        shared = tmp_path / "shared"
        assert _push(m, FileTarget(shared.as_uri())) == uris
        ran = LocalStoreTarget(tmp_path / "run-store")
        spec = json.loads((m / "re.yaml").read_text())
        out = publish_local(spec, m, ran)
        assert {"working_dir": out["working_dir"], "py_modules[0]": out["py_modules"][0]} == uris

        for field, name in _names(uris).items():
            pushed = store.store.package_file(name).read_bytes()
            served = {
                "run": ran.store.package_file(name).read_bytes(),
                "agent": requests.get(f"{agent.url}/api/packages/gcs/{name}",
                                      params={"download": "1"}, timeout=30).content,
                "watch-store": watch_store.store.package_file(name).read_bytes(),
                "watch-agent-delta": requests.get(f"{wagent.url}/api/packages/gcs/{name}",
                                                  params={"download": "1"}, timeout=30).content,
            }
            for route, data in served.items():
                assert data == pushed, (field, route)
            remote = {
                "file": (shared / name).read_bytes(),
                "watch-file": (tmp_path / "watch-shared" / name).read_bytes(),
                "agent-download": requests.get(
                    f"{agent.url}/download/{download_capability(None, name)}/{name}",
                    timeout=30).content,
            }
            for route, data in remote.items():
                assert data == _remote_of(pushed, tmp_path), (field, route)
            if field == "working_dir":
                _ray_accepts(tmp_path, m, "working_dir", excludes, uri=uris[field], data=pushed)
                _ray_accepts(tmp_path, m, "working_dir", excludes, uri=uris[field],
                             data=remote["file"], remote=True)
            else:
                helper = tmp_path / "proj" / "libs" / "helper"
                _ray_accepts(tmp_path, helper, "py_module", [], uri=uris[field], data=pushed)


def test_the_watch_store_assembles_what_push_wrote_for_the_watched_version(
        tmp_path: Path) -> None:
    """The agent holds the delta package (watch) before `push` sends the zip: the bytes it
    assembles from blobs are the zip `push` builds (the agent already has the URI, so push
    sends nothing and what the agent serves is its own assembly)."""
    m = make_project(tmp_path / "proj", "gitignored")
    with agent_process(tmp_path / "agent-store") as agent:
        with Running(m / "re.yaml", resolve_target(None, agent.url), base_dir=m) as run:
            _edit(m)
            ev = run.next_event(1)
        store = LocalStoreTarget(tmp_path / "store")
        assert _push(m, store) == dict(ev.uris)
        for name in _names(dict(ev.uris)).values():
            assert (agent.root / "manifests" / f"{name}.json").exists()
            served = requests.get(f"{agent.url}/api/packages/gcs/{name}",
                                  params={"download": "1"}, timeout=30).content
            assert served == store.store.package_file(name).read_bytes()
            with zipfile.ZipFile(store.store.package_file(name)) as zf:
                assert not any(n.startswith(("data", "cache")) for n in zf.namelist())


@pytest.mark.ray
@pytest.mark.parametrize("route", ["push", "watch"])
@pytest.mark.parametrize("via", ["gcs", "dashboard"])
def test_ray_targets_hold_the_same_bytes(ray_cluster: Any, tmp_path: Path, via: str,
                                         route: str) -> None:
    from rtenv_cli.core.transport.grpc_unary import field_bytes, parse_fields
    from rtenv_cli.core.transport.ray_gcs import RayGcsTarget

    # the content differs per variant and run (edit included), so each publishes fresh
    # packages: a URI already on the head may hold another checkout's bytes (its mtimes)
    marker = f"{via}-{route}-{os.urandom(4).hex()}"
    m = make_project(tmp_path / "proj", "gitignored", marker=marker)
    address = ray_cluster.dashboard_url if via == "dashboard" else ray_cluster.address
    if route == "watch":
        with Running(m / "re.yaml", resolve_target(None, address), pin_s=60, base_dir=m) as run:
            _edit(m, marker)
            uris = dict(run.next_event(1).uris)
    else:
        uris = _push(m, resolve_target(None, address))
    store = LocalStoreTarget(tmp_path / "store")
    assert _push(m, store) == uris
    gcs = RayGcsTarget.connect(ray_cluster.address)
    try:
        for name in _names(uris).values():
            reply = gcs.channel().unary("/ray.rpc.InternalKVGcsService/InternalKVGet",
                                        field_bytes(1, f"gcs://{name}".encode()))
            held = dict(parse_fields(reply)).get(2, b"")
            assert held == store.store.package_file(name).read_bytes()
    finally:
        gcs.close()
    shutil.rmtree(m)


def test_an_empty_working_dir_is_the_same_package_on_every_route(tmp_path: Path) -> None:
    """Ray zips an empty root as "./": the watch's delta package has it too."""
    empty = tmp_path / "empty"
    empty.mkdir()
    watch_store = LocalStoreTarget(tmp_path / "watch-store")
    with Running(empty, watch_store) as run:
        uri = run.events[0].uri
    store = LocalStoreTarget(tmp_path / "store")
    assert push(empty, target=store).packages[0].ray_uri == uri
    name = uri.removeprefix("gcs://")
    pushed = store.store.package_file(name).read_bytes()
    assert watch_store.store.package_file(name).read_bytes() == pushed
    _ray_accepts(tmp_path, empty, "working_dir", [], uri=uri, data=pushed)

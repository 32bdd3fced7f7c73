from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest
from ray._private.ray_constants import get_runtime_env_default_excludes
from ray._private.runtime_env.packaging import create_package, get_uri_for_file

from rtenv_cli.core.errors import PackagingError
from rtenv_cli.core.packaging.build import build_package
from tests.core.packaging.test_hashing import ray_uri
from tests.core.packaging.trees import EXCLUDES, TREES, add_symlinks, base_tree, w


def entries(zip_path: Path, strip: str = "") -> set[tuple[str, int, int]]:
    with zipfile.ZipFile(zip_path) as zf:
        return {(i.filename.removeprefix(strip), i.file_size, i.external_attr >> 16)
                for i in zf.infolist()}


def ray_zip(tmp: Path, root: Path, kind: str, excludes: list[str]) -> Path:
    out = tmp / f"ray-{kind}-{len(list(tmp.iterdir()))}.zip"
    ex = (get_runtime_env_default_excludes() if kind == "working_dir" else []) + excludes
    create_package(str(root), out, include_gitignore=True, include_parent_dir=kind == "py_module"
                   and root.is_dir(), excludes=ex)
    return out


@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize("kind", ["working_dir", "py_module"])
def test_zip_entries_equal_rays(tmp_path: Path, tree: str, kind: str) -> None:
    root = tmp_path / "mylib"
    root.mkdir()
    TREES[tree](root)
    if tree == "plain":
        add_symlinks(root, tmp_path / "outside")
    out = tmp_path / "out"
    out.mkdir()
    for excludes in EXCLUDES:
        if excludes in (["*"], [".*"]) or (tree == "gitignore_whitelist"):
            continue  # root excluded: refused (test_root_excluded_refused)
        built = build_package(root, kind=kind, excludes=excludes, env={}, dest_dir=out)
        assert built.uri == ray_uri(root, kind, excludes)
        assert entries(built.path) == entries(ray_zip(tmp_path / "out", root, kind, excludes)), \
            (tree, kind, excludes)
        with zipfile.ZipFile(built.path) as zf:
            assert zf.testzip() is None


def test_single_py_and_empty_root(tmp_path: Path) -> None:
    py = w(tmp_path, "m.py", "Z = 3\n" * 100)
    built = build_package(py, kind="py_module", dest_dir=tmp_path / "o")
    assert built.uri == get_uri_for_file(str(py))
    assert entries(built.path) == entries(ray_zip(tmp_path / "o", py, "py_module", []))
    empty = tmp_path / "empty"
    empty.mkdir()
    b2 = build_package(empty, kind="working_dir", dest_dir=tmp_path / "o")
    assert entries(b2.path) == entries(ray_zip(tmp_path / "o", empty, "working_dir", []))


def test_root_excluded_refused(tmp_path: Path) -> None:
    root = tmp_path / "r"
    w(root, "a.py")
    with pytest.raises(PackagingError, match="3030303030303030"):
        build_package(root, kind="working_dir", excludes=[".*"], dest_dir=tmp_path / "o")


def test_remote_layout_has_one_top_dir_and_compresses_what_shrinks(tmp_path: Path) -> None:
    root = tmp_path / "r"
    w(root, "a.py", "print(1)\n" * 2000)
    (root / "rnd.bin").write_bytes(os.urandom(200_000))
    built = build_package(root, kind="working_dir", layout="remote", dest_dir=tmp_path / "o",
                          compress=True)
    with zipfile.ZipFile(built.path) as zf:
        tops = {i.filename.split("/")[0] for i in zf.infolist()}
        methods = {i.filename: i.compress_type for i in zf.infolist()}
    assert tops == {"pkg"}
    assert methods["pkg/a.py"] == zipfile.ZIP_DEFLATED
    assert methods["pkg/rnd.bin"] == zipfile.ZIP_STORED  # random: the probe says it won't shrink
    assert built.zip_bytes < built.total_bytes


def test_members_are_stored_as_ray_stores_them_and_the_stored_size_is_known_ahead(
        tmp_path: Path) -> None:
    """By default nothing is deflated (it costs more CPU than it saves on a fast link); the
    size of that zip is known from the entries before it is written (`stored_size`), which
    decides whether it fits a target's limit."""
    from rtenv_cli.core.packaging.build import fits_stored, stored_size
    from rtenv_cli.core.packaging.walk import scan_package

    root = tmp_path / "r"
    w(root, "a.py", "print(1)\n" * 2000)
    w(root, "pkg/caf\u00e9.py", "x = 1\n")
    (root / "empty").mkdir()
    (root / "rnd.bin").write_bytes(os.urandom(200_000))
    for layout in ("ray", "remote"):
        built = build_package(root, kind="working_dir", layout=layout,  # type: ignore[arg-type]
                              dest_dir=tmp_path / layout, use_cache=False)
        with zipfile.ZipFile(built.path) as zf:
            assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
        scan = scan_package(root, kind="working_dir")
        estimate = stored_size(scan, layout)  # type: ignore[arg-type]
        assert built.zip_bytes <= estimate <= built.zip_bytes + 2 * 28
        assert fits_stored(scan, layout, estimate) is True  # type: ignore[arg-type]
        assert fits_stored(scan, layout, built.zip_bytes - 1) is False  # type: ignore[arg-type]
        assert fits_stored(scan, layout, None) is None  # type: ignore[arg-type]


def test_file_changed_while_packaging_is_never_published(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.packaging import build as b

    root = tmp_path / "r"
    f = w(root, "a.py", "one")
    real = b._prepare
    calls = {"n": 0}

    def edit_during(e, compress, *rest):
        calls["n"] += 1
        os.utime(f, ns=(1, calls["n"] * 10**9))  # the file "changes" under us every time
        return real(e, compress, *rest)

    monkeypatch.setattr(b, "_prepare", edit_during)
    with pytest.raises(PackagingError, match="kept changing"):
        build_package(root, kind="working_dir", dest_dir=tmp_path / "o")
    assert not list((tmp_path / "o").glob("_ray_pkg_*"))


@pytest.mark.parametrize("kind", ["working_dir", "py_module"])
def test_rebuild_reuses_unchanged_members_and_equals_ray(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "mylib"
    for i in range(30):
        w(root, f"pkg/m{i}.py", f"VALUE = {i}\n" * 50)
    w(root, "data.txt", os.urandom(200_000).hex())
    out = tmp_path / "out"
    out.mkdir()
    first = build_package(root, kind=kind, env={}, dest_dir=out)
    assert first.reused == 0
    w(root, "pkg/m3.py", "VALUE = 'edited'\n")
    (root / "pkg/m4.py").unlink()
    w(root, "pkg/new.py", "NEW = 1\n")
    second = build_package(root, kind=kind, env={}, dest_dir=out)
    assert second.reused == 29  # 31 files before; one edited, one removed, one new
    assert second.uri == ray_uri(root, kind, [])
    theirs = ray_zip(tmp_path / "out", root, kind, [])
    assert entries(second.path) == entries(theirs)
    with zipfile.ZipFile(second.path) as ours, zipfile.ZipFile(theirs) as ray:
        assert ours.testzip() is None
        assert {i.filename: ours.read(i) for i in ours.infolist()} == \
            {i.filename: ray.read(i) for i in ray.infolist()}
    kept = second.path.read_bytes()
    cold = build_package(root, kind=kind, env={}, dest_dir=tmp_path / "cold", use_cache=False)
    assert cold.reused == 0
    assert cold.path.read_bytes() == kept  # the spliced rebuild is what a fresh build writes
    second.path.unlink()
    third = build_package(root, kind=kind, env={}, dest_dir=out)  # nothing changed
    assert third.reused == 31
    assert third.path.read_bytes() == kept  # byte ranges copied verbatim, offsets rewritten


def test_many_small_files_through_worker_processes_equal_ray(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.packaging import build, pool

    monkeypatch.setattr(build, "STORED_FORK_MIN_FILES", pool.PROCESS_MIN_FILES)  # forked
    root = tmp_path / "many"
    for i in range(pool.PROCESS_MIN_FILES + 100):
        w(root, f"d{i % 13}/f{i}.py", f"X = {i}\n" * (i % 40 + 1))
    w(root, "rand.txt", os.urandom(30_000).hex())
    (root / "blob.bin").write_bytes(os.urandom(70_000))
    out = tmp_path / "out"
    out.mkdir()
    built = build_package(root, kind="working_dir", env={}, dest_dir=out, use_cache=False)
    assert built.uri == ray_uri(root, "working_dir", [])
    theirs = ray_zip(tmp_path / "out", root, "working_dir", [])
    with zipfile.ZipFile(built.path) as ours, zipfile.ZipFile(theirs) as ray:
        assert ours.testzip() is None
        assert {i.filename: ours.read(i) for i in ours.infolist()} == \
            {i.filename: ray.read(i) for i in ray.infolist()}


def _many(root: Path, n: int) -> Path:
    for i in range(n):
        w(root, f"d{i % 7}/m{i}.py", f"X = {i}\n" * (i % 50 + 1))
    w(root, "data/blob.bin", "")
    (root / "data" / "blob.bin").write_bytes(os.urandom(9 << 20))  # a large file, streamed
    return root


def test_worker_batches_make_the_same_zip_in_processes_threads_and_inline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small files are zipped by workers into batch files that the writer copies in: the zip
    is the same whichever kind of worker did it, and nothing of the batches is left."""
    from rtenv_cli.core.packaging import build, pool

    monkeypatch.setattr(build, "STORED_FORK_MIN_FILES", 0)  # stored members forked when many
    root = _many(tmp_path / "src", 600)
    zips = []
    for kind, process_min, inline_max in (("processes", 512, 4), ("threads", 10**6, 4),
                                          ("inline", 10**6, 10**6)):
        monkeypatch.setattr(pool, "PROCESS_MIN_FILES", process_min)
        monkeypatch.setattr(pool, "INLINE_FILES", inline_max)
        out = tmp_path / kind
        built = build_package(root, kind="working_dir", env={}, dest_dir=out, use_cache=False)
        assert [p.name for p in out.iterdir()] == [built.path.name]
        zips.append(built.path.read_bytes())
    assert zips[0] == zips[1] == zips[2]
    with zipfile.ZipFile(tmp_path / "processes" / built.path.name) as zf:
        assert zf.testzip() is None
        assert zf.read("d3/m3.py") == (root / "d3" / "m3.py").read_bytes()
    assert entries(tmp_path / "processes" / built.path.name) == entries(
        ray_zip(tmp_path, root, "working_dir", []))


def test_a_failing_worker_leaves_no_batch_files(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from rtenv_cli.core.packaging import build

    monkeypatch.setattr(build, "STORED_FORK_MIN_FILES", 0)  # forked workers, batch files
    root = _many(tmp_path / "src", 600)
    real = build._prepare

    def failing(e: object, compress: bool, *rest: bool) -> object:
        if getattr(e, "relpath", "") == "d1/m400.py":
            raise PackagingError("cannot read d1/m400.py: simulated")
        return real(e, compress, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(build, "_prepare", failing)  # forked workers inherit it
    with pytest.raises(PackagingError, match="simulated"):
        build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "out",
                      use_cache=False)
    assert list((tmp_path / "out").iterdir()) == []


def test_stored_members_go_to_forked_workers_only_for_very_many_small_files(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads cost less CPU; forks win only where the per-file work dominates (build.py's
    STORED_FORK_MIN_FILES); the ablation switch forces either side."""
    from rtenv_cli.core.packaging import build

    limit = build.STORED_FORK_MIN_FILES
    assert not build.stored_by_forks(10_000)  # the 10k-file shapes of the scaling set
    assert not build.stored_by_forks(limit - 1)
    assert build.stored_by_forks(limit)
    assert build.stored_by_forks(50_000)
    monkeypatch.setattr(build, "STORED_WORKERS", "forks")
    assert build.stored_by_forks(1_000)
    monkeypatch.setattr(build, "STORED_WORKERS", "threads")
    assert not build.stored_by_forks(50_000)


@pytest.mark.parametrize("tree", sorted(TREES))
def test_hashed_dirs_complete_what_the_zip_shows_to_the_uri(tmp_path: Path, tree: str) -> None:
    """What Ray hashes but does not zip (folders whose files are all excluded, broken links)
    is exactly `hashed_dirs`: with it a store verifies the package against its name."""
    from rtenv_cli.core.store.rayhash import verify_package

    root = tmp_path / "mylib"
    root.mkdir()
    TREES[tree](root)
    if tree == "plain":
        add_symlinks(root, tmp_path / "outside")
    for kind in ("working_dir", "py_module"):
        for excludes in EXCLUDES:
            if excludes in (["*"], [".*"]) or tree == "gitignore_whitelist":
                continue
            built = build_package(root, kind=kind, excludes=excludes, env={},
                                  dest_dir=tmp_path / "o", use_cache=False)
            verify_package(built.path.name, built.path, extra_dirs=built.hashed_dirs)
            if built.hashed_dirs:
                with pytest.raises(PackagingError, match="does not match"):
                    verify_package(built.path.name, built.path)
            built.path.unlink()


def test_the_stores_remote_copy_is_the_remote_build(tmp_path: Path) -> None:
    """The agent's rendition for Ray's nodes (`/download/...`, raw member copies under `pkg/`)
    is byte for byte what `push` writes to file:// for the same tree."""
    from rtenv_cli.core.store.zips import prefixed_copy

    root = base_tree(tmp_path / "r")
    (root / "rnd.bin").write_bytes(os.urandom(50_000))
    ray_layout = build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "a",
                               use_cache=False)
    remote = build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "b",
                           layout="remote", use_cache=False)
    prefixed_copy(ray_layout.path, tmp_path / "copy.zip", "pkg/")
    assert (tmp_path / "copy.zip").read_bytes() == remote.path.read_bytes()


def test_zipfile_internals_are_touched_in_one_module() -> None:
    """zipfile has no public raw-append API; only zipreuse (its ZipAppender) reaches in."""
    import re

    import rtenv_cli

    pattern = re.compile(r"\.(fp|start_dir|filelist|NameToInfo|_didModify|_compresslevel|"
                         r"FileHeader)\b")
    pkg = Path(rtenv_cli.__file__).parent
    users = sorted(str(p.relative_to(pkg)) for p in pkg.rglob("*.py")
                   if pattern.search(p.read_text(encoding="utf-8")))
    assert users == ["core/packaging/zipreuse.py"]


def test_files_whose_digests_the_caller_has_are_zipped_without_hashing_them_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Push hashes the tree for its URI check first: the zip pass then reads each file for its
    member only (build.HASH_ONCE), and the zip and URI are the same as from a cold build."""
    import hashlib

    from rtenv_cli.core.packaging.build import build_scan
    from rtenv_cli.core.packaging.hashing import digest_entries
    from rtenv_cli.core.packaging.walk import scan_package

    root = _many(tmp_path / "src", 40)  # small files in batches, a large one streamed
    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    scan = scan_package(root, kind="working_dir", env={})
    digests = digest_entries(scan.entries, use_cache=False)
    hashed: list[int] = []
    real_sha1 = hashlib.sha1

    def counting(*args: object, **kwargs: object) -> object:
        hashed.append(1)
        return real_sha1(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hashlib, "sha1", counting)
    built = build_scan(scan, dest_dir=tmp_path / "given", digests=digests, use_cache=False)
    monkeypatch.setattr(hashlib, "sha1", real_sha1)
    assert hashed == []
    cold = build_package(root, kind="working_dir", env={}, dest_dir=tmp_path / "cold",
                         use_cache=False)
    assert built.uri == cold.uri == ray_uri(root, "working_dir", [])
    assert built.path.read_bytes() == cold.path.read_bytes()

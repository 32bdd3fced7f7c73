from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from ray._private.ray_constants import get_runtime_env_default_excludes
from ray._private.runtime_env.packaging import (
    get_uri_for_directory,
    get_uri_for_file,
    get_uri_for_package,
)

from rtenv_cli.core.errors import ConfigError, PackagingError
from rtenv_cli.core.packaging.hashing import (
    EMPTY_ACC,
    EMPTY_URI,
    entry_digest,
    fold,
    package_uri,
    uri_for_acc,
)
from tests.core.packaging.trees import EXCLUDES, TREES, add_symlinks, w


def ray_uri(root: Path, kind: str, excludes: list[str]) -> str:
    include_gitignore = os.environ.get("RAY_RUNTIME_ENV_IGNORE_GITIGNORE", "0") != "1"
    ex = (get_runtime_env_default_excludes() if kind == "working_dir" else []) + excludes
    return get_uri_for_directory(str(root), include_gitignore, ex)


@pytest.mark.parametrize("tree", sorted(TREES))
@pytest.mark.parametrize("kind", ["working_dir", "py_module"])
def test_directory_uri_matches_ray(tmp_path: Path, tree: str, kind: str) -> None:
    root = tmp_path / "t"
    root.mkdir()
    TREES[tree](root)
    for excludes in EXCLUDES:
        assert package_uri(root, kind=kind, excludes=excludes) == ray_uri(root, kind, excludes), \
            (tree, kind, excludes)


@pytest.mark.parametrize("env", [{"RAY_RUNTIME_ENV_IGNORE_GITIGNORE": "1"},
                                 {"RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES": ""},
                                 {"RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES": "data, *.csv"}])
def test_env_switches_match_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                env: dict[str, str]) -> None:
    root = tmp_path / "t"
    root.mkdir()
    TREES["gitignore_nested"](root)
    w(root, ".rayignore", "*.csv\n")
    before = package_uri(root, kind="working_dir", env={})
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    got = package_uri(root, kind="working_dir", env=dict(os.environ))
    assert got == ray_uri(root, "working_dir", [])
    assert got != before


def test_symlinks_in_and_out_and_broken(tmp_path: Path) -> None:
    root = tmp_path / "t"
    root.mkdir()
    TREES["plain"](root)
    add_symlinks(root, tmp_path / "outside")
    assert package_uri(root, kind="working_dir") == ray_uri(root, "working_dir", [])


def test_single_py_whl_archives(tmp_path: Path) -> None:
    py = w(tmp_path, "m.py", "Z = 3\n")
    assert package_uri(py, kind="py_module") == get_uri_for_file(str(py))
    whl = w(tmp_path, "demo-1.0-py3-none-any.whl", "not really a wheel")
    assert package_uri(whl, kind="py_module") == get_uri_for_package(whl) == \
        "gcs://demo-1.0-py3-none-any.whl"
    for name in ("a.zip", "b.tar.gz", "c.tgz", "d.tar.xz"):
        arc = w(tmp_path, name, name * 10)
        assert package_uri(arc, kind="working_dir") == get_uri_for_package(arc)
    with pytest.raises(ConfigError):
        package_uri(tmp_path / "a.zip", kind="py_module")
    with pytest.raises(ConfigError):
        package_uri(py, kind="working_dir")


def test_empty_root_and_root_excluded(tmp_path: Path) -> None:
    root = tmp_path / "e"
    root.mkdir()
    assert package_uri(root, kind="working_dir") == ray_uri(root, "working_dir", [])
    w(root, "a.py")
    assert package_uri(root, kind="working_dir", excludes=["*"]) == EMPTY_URI == \
        ray_uri(root, "working_dir", ["*"])


def test_modes_do_not_change_uri_and_unicode_names(tmp_path: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    f = w(root, "ñ/ß.py", "x")
    u1 = package_uri(root, kind="working_dir")
    f.chmod(0o755)
    assert package_uri(root, kind="working_dir") == u1 == ray_uri(root, "working_dir", [])


def test_primitives() -> None:
    d = entry_digest(".", None, True)
    assert d == hashlib.sha1(b".").digest()  # noqa: S324 - Ray's scheme
    assert len(fold(EMPTY_ACC, d)) == 8
    assert uri_for_acc(EMPTY_ACC) == "gcs://_ray_pkg_3030303030303030.zip"


def test_clear_errors(tmp_path: Path) -> None:
    root = tmp_path / "bad"
    root.mkdir()
    os.mkfifo(root / "pipe")
    with pytest.raises(PackagingError, match="named pipe"):
        package_uri(root, kind="working_dir")
    (root / "pipe").unlink()
    (root / "d").mkdir()
    os.symlink("..", root / "d" / "up")
    with pytest.raises(PackagingError, match="symlink loop"):
        package_uri(root, kind="working_dir")
    (root / "d" / "up").unlink()
    os.close(os.open(os.path.join(os.fsencode(root), b"bad\xff"), os.O_CREAT | os.O_WRONLY))
    with pytest.raises(PackagingError, match="UTF-8"):
        package_uri(root, kind="working_dir")


def test_digest_cache_reused_and_invalidated(tmp_path: Path) -> None:
    root = tmp_path / "c"
    root.mkdir()
    f = w(root, "a.py", "one")
    u1 = package_uri(root, kind="working_dir")
    assert package_uri(root, kind="working_dir") == u1
    f.write_text("two")
    assert package_uri(root, kind="working_dir") == ray_uri(root, "working_dir", []) != u1

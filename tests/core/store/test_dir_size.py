"""One byte count for "what a tree takes on disk": the store's `dir_size` (entries, uv's cache,
`cache ls`, the benchmarks) and the node scan's stdlib copy (`ray_scan.du`, run where rtenv may
not be installed) agree with each other and with `du`, on a tree with hardlinks and symlinks."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rtenv_cli.core.cache import ray_scan
from rtenv_cli.core.store.files import dir_size

BLOCK = 4096


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "a.bin").write_bytes(os.urandom(5 * BLOCK))
    (root / "pkg" / "sub" / "b.bin").write_bytes(os.urandom(3 * BLOCK))
    os.link(root / "pkg" / "a.bin", root / "pkg" / "sub" / "a-again.bin")  # as uv links a venv
    os.link(root / "pkg" / "a.bin", root / "a-third.bin")
    os.symlink("pkg/a.bin", root / "link-to-file")
    os.symlink("pkg", root / "link-to-dir")  # not followed
    os.symlink("missing", root / "dangling")
    outside = tmp_path / "outside.bin"  # a hardlink from outside the tree counts inside it
    outside.write_bytes(os.urandom(2 * BLOCK))
    os.link(outside, root / "from-outside.bin")
    return root


def _blocks(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


def test_a_hardlinked_file_counts_once_and_links_are_not_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    inodes = [root, root / "pkg", root / "pkg" / "sub", root / "pkg" / "a.bin",
              root / "pkg" / "sub" / "b.bin", root / "link-to-file", root / "link-to-dir",
              root / "dangling", root / "from-outside.bin"]
    assert dir_size(root) == sum(_blocks(p) for p in inodes)
    assert dir_size(root / "link-to-dir") == _blocks(root / "link-to-dir")
    assert dir_size(root / "pkg" / "a.bin") == _blocks(root / "pkg" / "a.bin")
    assert dir_size(tmp_path / "missing") == 0


def test_the_node_scans_copy_agrees_with_the_store(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    for path in (root, root / "pkg", root / "link-to-dir", root / "pkg" / "a.bin",
                 tmp_path / "missing"):
        assert ray_scan.du(str(path)) == dir_size(path), path


@pytest.mark.skipif(shutil.which("du") is None, reason="no du on this machine")
def test_both_count_as_du_does(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    out = subprocess.run(["du", "-s", "--block-size=1", str(root)], capture_output=True,
                         text=True, check=True).stdout
    assert dir_size(root) == int(out.split()[0])

"""Generated trees for URI/zip parity tests against Ray's own packaging functions."""

from __future__ import annotations

import os
from pathlib import Path


def w(root: Path, rel: str, text: str = "x", mode: int | None = None) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    if mode is not None:
        p.chmod(mode)
    return p


def base_tree(root: Path) -> Path:
    w(root, "main.py", "print('hi')\n")
    w(root, "pkg/__init__.py", "X = 1\n")
    w(root, "pkg/mod.py", "Y = 2\n", 0o755)
    w(root, "data/a.csv", "1,2\n")
    w(root, "data/big.ckpt", "0" * 5000)
    w(root, "café/ünï.txt", "unicode\n")
    (root / "empty").mkdir()
    (root / "empty_mode").mkdir(mode=0o700)
    w(root, "logs/x.log", "l")
    w(root, "logs/keep.txt", "k")
    w(root, ".hidden", "h")
    w(root, ".git/HEAD", "ref")
    w(root, ".venv/lib/site.py", "s")
    w(root, "sub/__pycache__/m.pyc", "c")
    w(root, "sub/deep/file.tmp", "t")
    w(root, "sub/deep/important.tmp", "i")
    w(root, "sub/deep/ok.py", "o")
    w(root, "dirpat", "a regular file named like a dir pattern")
    return root


TREES = {
    "plain": base_tree,
    "gitignore_nested": lambda r: (base_tree(r), w(r, ".gitignore", "*.ckpt\n*.tmp\nlogs/\n"
                                                   "!logs/keep.txt\n  # comment\n\n"),
                                   w(r, "sub/.gitignore", "!important.tmp\n*.py  \n")),
    "gitignore_whitelist": lambda r: (base_tree(r), w(r, ".gitignore", "*\n!*.py\n")),
    "rayignore": lambda r: (base_tree(r), w(r, ".rayignore", "data/\n"),
                            w(r, "sub/.rayignore", "deep\n")),
    "nested_star": lambda r: (base_tree(r), w(r, "sub/.gitignore", "*\n")),
    "dir_slash": lambda r: (base_tree(r), w(r, ".gitignore", "dirpat/\nempty/\n/pkg/mod.py\n")),
    "crlf_ws": lambda r: (base_tree(r), w(r, ".gitignore", "  *.csv  \r\n\t*.log\r\n\\#x\n")),
}

EXCLUDES = [
    [],
    ["*.ckpt"],
    ["*"],
    [".*"],
    ["data/"],
    ["data"],
    ["/main.py", "sub/deep/*.tmp", "!sub/deep/important.tmp"],
    ["**/*.py"],
    ["!.git"],
]


def add_symlinks(root: Path, outside: Path) -> None:
    outside.mkdir(exist_ok=True)
    (outside / "o.txt").write_text("outside")
    os.symlink(outside, root / "link_out")
    os.symlink(root / "main.py", root / "link_in.py")
    os.symlink(root / "pkg", root / "pkg_link")
    os.symlink(root / "nowhere", root / "broken")

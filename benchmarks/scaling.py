"""The scaling set of tree shapes (issue 23): file count 1k / 10k / 50k at 200 MB, total size
20 MB / 200 MB / 1 GB at 10k files, each random (incompressible) or text-heavy (source-like
text). Trees are deterministic (seeded by their shape) and kept under the temp dir for re-runs.

The 1 GB shapes take minutes per run on a 2-core box: they are built and measured only with
RTENV_BENCH_BIG=1, and deleted after use unless RTENV_BENCH_KEEP=1.
RTENV_BENCH_SHAPES=<slug>,... measures only those shapes (a slug is
`<files>-<bytes>-<content>`, e.g. 1000-200000000-text; a prefix such as `10000-` matches every
shape that starts with it), for a quick look at the shapes a change touches.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(tempfile.gettempdir()) / "rtenv_bench_scaling"
WORDS = ["alpha", "beta", "gamma", "delta", "ray", "task", "actor", "import", "def", "return",
         "self", "value", "numpy", "train", "model", "batch", "=", "(", ")", ":", "\n",
         "for", "in", "range", "if", "else", "print", "config", "dataset", "loss"]
BIG_ENV = "RTENV_BENCH_BIG"
SHAPES_ENV = "RTENV_BENCH_SHAPES"
KEEP_ENV = "RTENV_BENCH_KEEP"  # "1": keep the 1 GB trees after a run (see `release`)


@dataclass(frozen=True)
class Shape:
    files: int
    total_bytes: int
    content: str  # "random" | "text"

    @property
    def name(self) -> str:
        size = (f"{self.total_bytes // 10**9} GB" if self.total_bytes >= 10**9
                else f"{self.total_bytes // 10**6} MB")
        return f"{self.files // 1000}k files/{size} {self.content}"

    @property
    def slug(self) -> str:
        return f"{self.files}-{self.total_bytes}-{self.content}"

    @property
    def big(self) -> bool:
        return self.total_bytes >= 10**9


def shapes(*, quick: bool = False) -> list[Shape]:
    """The set, smallest first (quick: the 20 MB shapes only); 1 GB shapes only when
    RTENV_BENCH_BIG=1; only those RTENV_BENCH_SHAPES names, when set (module doc)."""
    out = []
    for content in ("text", "random"):
        for files in (1_000, 10_000, 50_000):
            out.append(Shape(files, 200 * 10**6, content))
        out.append(Shape(10_000, 20 * 10**6, content))
        out.append(Shape(10_000, 10**9, content))
    if quick:
        return [s for s in out if s.total_bytes == 20 * 10**6]
    big = os.environ.get(BIG_ENV) == "1"
    only = [w for w in os.environ.get(SHAPES_ENV, "").split(",") if w]
    return sorted((s for s in out if (big or not s.big)
                   and (not only or any(s.slug.startswith(w) for w in only))),
                  key=lambda s: (s.total_bytes, s.files))


def _text(rng: random.Random, size: int) -> bytes:
    words = []
    n = 0
    while n < size:
        w = rng.choice(WORDS)
        words.append(w)
        n += len(w) + 1
    return " ".join(words).encode()[:size]


def make(shape: Shape) -> Path:
    """The tree of `shape` (built once; a `.complete` marker, ignored by .gitignore, says so)."""
    root = ROOT / shape.slug
    marker = root / ".complete"
    if marker.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(shape.slug)
    per_file = shape.total_bytes // shape.files
    # text is generated in blocks and sliced per file: words per file would take minutes
    block = _text(rng, 4 << 20) if shape.content == "text" else b""
    dirs = max(1, shape.files // 50)
    for i in range(shape.files):
        d = root / f"pkg{i % dirs}" / f"sub{i % 3}"
        d.mkdir(parents=True, exist_ok=True)
        size = max(1, int(per_file * rng.uniform(0.5, 1.5)))
        if shape.content == "text":
            start = rng.randrange(0, max(1, len(block) - size))
            data = block[start:start + size]
            if len(data) < size:
                data = (block * (size // len(block) + 1))[:size]
            data = f"# file {i}\n".encode() + data
        else:
            data = rng.randbytes(size)
        (d / (f"m{i}.py" if shape.content == "text" else f"b{i}.bin")).write_bytes(data)
    (root / ".gitignore").write_text(".complete\n")
    marker.write_text("ok")
    return root


def release(shape: Shape) -> None:
    """Delete a 1 GB tree once its rows are measured (a gigabyte of disk each), unless
    RTENV_BENCH_KEEP=1; the smaller trees stay for re-runs."""
    if shape.big and os.environ.get(KEEP_ENV) != "1":
        shutil.rmtree(ROOT / shape.slug, ignore_errors=True)

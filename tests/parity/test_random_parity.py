"""Differential test: random combinations of fields (seeded) through Ray and through rtenv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.parity.corpus import FIXTURES
from tests.parity.generate import documents
from tests.parity.test_parity import DIR_URI, EQUIVALENT_KINDS, REPO, _mask_dirs, _rtenv

COUNT = 400


@pytest.mark.slow
def test_random_documents_match_ray(tmp_path: Path) -> None:
    # not tmp_path itself: RTENV_HOME (the digest cache) lives there, and `working_dir: ""`
    # packages the whole corpus root
    tmp_path = tmp_path / "corpus"
    for rel, content in FIXTURES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    (tmp_path / "gen").mkdir()
    files = []
    for index, (ext, text) in enumerate(documents(seed=20260, count=COUNT)):
        path = tmp_path / "gen" / f"{index:04d}.{ext}"
        path.write_text(text)
        files.append(path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "tests.parity.ray_side",
                           *[str(f.relative_to(tmp_path)) for f in files]], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ray = json.loads(proc.stdout)
    mask = _mask_dirs()
    mismatches = []
    for file in files:
        for api in ("job-submit", "ray-init"):
            theirs = ray[str(file.relative_to(tmp_path))][api]
            ours = _rtenv(tmp_path, file, api)
            ours_norm = None if ours["normalized"] is None else json.dumps(
                ours["normalized"], sort_keys=True, allow_nan=api == "ray-init")
            theirs_norm = theirs["normalized"]
            if mask:
                ours_norm = ours_norm and DIR_URI.sub("<dir>", ours_norm)
                theirs_norm = theirs_norm and DIR_URI.sub("<dir>", theirs_norm)
            ray_kind = (theirs["error"] or "").split(":", 1)[0] or None
            our_kind = EQUIVALENT_KINDS.get(ours["kind"], ours["kind"])
            if ours["valid"] != theirs["valid"] or ours_norm != theirs_norm or (
                    not theirs["valid"] and our_kind != ray_kind):
                mismatches.append(f"{api} {file.name}: {file.read_text()!r}\n  ray={theirs}\n"
                                  f"  rtenv={ours}")
    assert mismatches == [], "\n".join(mismatches[:10])

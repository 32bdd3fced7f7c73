"""Verdict and normalized-dict parity with Ray 2.60.0 over the whole corpus, for both APIs.

Ray's side runs once, in one subprocess (tests/parity/ray_side.py), for every file; rtenv's side
runs in-process. Both use the corpus root as the CWD/base directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.spec.loader import load_path
from rtenv_cli.core.spec.pipeline import RaySemantics, run_pipeline
from tests.parity.corpus import CASES, write_corpus

REPO = Path(__file__).resolve().parents[2]
# a directory package's URI (16 hex); compared exactly (set RTENV_PARITY_MASK_DIRS=1 to mask)
DIR_URI = re.compile(r"gcs://_ray_pkg_[0-9a-f]{16}\.zip")
# Ray raises these where rtenv names the exception the real client raises around them
EQUIVALENT_KINDS = {"InvalidJSONError": "ValueError"}


def _mask_dirs() -> bool:
    return os.environ.get("RTENV_PARITY_MASK_DIRS") == "1"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], dict[str, Any]]:
    root = tmp_path_factory.mktemp("parity")
    files = write_corpus(root)
    rel = [str(f.relative_to(root)) for f in files]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run([sys.executable, "-m", "tests.parity.ray_side", *rel], cwd=root,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, files, json.loads(proc.stdout)


def _normalized_text(value: dict[str, Any] | None, *, allow_nan: bool, mask: bool) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, sort_keys=True, allow_nan=allow_nan)
    return DIR_URI.sub("<dir>", text) if mask else text


def _rtenv(root: Path, file: Path, api: str) -> dict[str, Any]:
    doc = load_path(file)
    if doc.error is not None:
        return {"valid": False, "kind": doc.error.kind, "normalized": None}
    result = run_pipeline(doc.data, RaySemantics(root, api, {}))  # type: ignore[arg-type]
    first = result.errors[0] if result.errors else None
    return {"valid": result.valid, "kind": first.python_type if first else None,
            "normalized": result.normalized, "errors": [e.message for e in result.errors]}


def test_corpus_is_large_and_covers_every_field() -> None:
    from rtenv_cli.core.spec.model import ALL_TOP_LEVEL_KEYS

    assert len(CASES) >= 150
    text = "\n".join(c if isinstance(c, str) else c.decode("latin-1") for _, _, c in CASES)
    missing = [k for k in ALL_TOP_LEVEL_KEYS if f"{k}:" not in text and f'"{k}"' not in text]
    assert missing == []
    assert {ext for _, ext, _ in CASES} == {"yaml", "json"}


@pytest.mark.parametrize("api", ["job-submit", "ray-init"])
def test_verdict_and_normalized_equal_rays(corpus: tuple[Path, list[Path], dict[str, Any]],
                                           api: str) -> None:
    root, files, ray = corpus
    mask = _mask_dirs()
    mismatches = []
    for file in files:
        theirs = ray[str(file.relative_to(root))][api]
        ours = _rtenv(root, file, api)
        allow_nan = api == "ray-init"
        ours_norm = _normalized_text(ours["normalized"], allow_nan=allow_nan, mask=mask)
        theirs_norm = theirs["normalized"]
        if theirs_norm is not None and mask:
            theirs_norm = DIR_URI.sub("<dir>", theirs_norm)
        ray_kind = (theirs["error"] or "").split(":", 1)[0] or None
        our_kind = EQUIVALENT_KINDS.get(ours["kind"], ours["kind"])
        if ours["valid"] != theirs["valid"] or ours_norm != theirs_norm or (
                not theirs["valid"] and our_kind != ray_kind):
            mismatches.append(f"{file.name}: ray={theirs['valid']} {theirs['error']!r} "
                              f"{theirs_norm}\n    rtenv={ours['valid']} {ours['kind']} "
                              f"{ours.get('errors')} {ours_norm}")
    assert mismatches == [], "\n".join(mismatches)

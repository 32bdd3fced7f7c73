"""The generated list of Ray's `RAY_*` names (RTE137) is current for the Ray CI installs, and
ships in the wheel."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_names_are_what_the_generator_reads_from_the_installed_ray() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_ray_env_names
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from rtenv_cli.core.lint.rules.ray_env_names import DATA

    assert DATA.read_text(encoding="utf-8") == gen_ray_env_names.current(), (
        "ray_env_names.json is stale: run `python scripts/gen_ray_env_names.py`")


def test_the_names_are_for_the_ray_rtenv_targets() -> None:
    from rtenv_cli.core.lint.rules.ray_env_names import DATA, ray_env_names
    from rtenv_cli.core.spec.model import RAY_VERSION

    assert json.loads(DATA.read_text(encoding="utf-8"))["ray_version"] == RAY_VERSION
    assert "RAY_DEBUG_POST_MORTEM" in ray_env_names()
    assert all(name.startswith("RAY_") for name in ray_env_names())


def test_the_data_file_is_in_the_wheel() -> None:
    """hatch's wheel takes every file under rtenv_cli/ that git does not ignore (checked once
    with `uv build --wheel`): the JSON is neither ignored nor excluded."""
    import subprocess

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from rtenv_cli.core.lint.rules.ray_env_names import DATA

    rel = DATA.relative_to(ROOT).as_posix()
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"]["wheel"]
    assert rel.startswith(tuple(f"{p}/" for p in wheel["packages"]))
    assert not wheel.get("exclude")
    ignored = subprocess.run(["git", "check-ignore", "-q", rel], cwd=ROOT, check=False)
    assert ignored.returncode == 1, f"{rel} is ignored by git: hatch would leave it out"

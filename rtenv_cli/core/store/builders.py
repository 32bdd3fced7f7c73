"""Builders: a uv virtual environment for `pip`/`uv`, and an unpacked package for working_dir and
py_modules. Each fills an empty directory the store later publishes by rename.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from rtenv_cli.core.errors import AgentError, BuildError, PackagingError

# Ray's default uv options disable the cache; a shared cache is the point of the agent
_DROPPED_OPTIONS = {"--no-cache", "-n"}
BUILD_TIMEOUT_S = 900
CHECK_MARK = "rtenv:check"  # in a venv's options: `pip_check`/`uv_check` was requested


def uv_bin() -> str:
    try:
        from uv import find_uv_bin
    except ImportError as exc:  # pragma: no cover - uv is a runtime dependency
        raise AgentError("the uv package is not installed", hint="pip install uv") from exc
    return find_uv_bin()


def python_identity() -> dict[str, str]:
    """What a venv's key depends on besides its requirements."""
    return {"python": sys.version.split()[0], "executable": sys.executable,
            "prefix": sys.prefix}


def venv_key(kind: str, packages: Sequence[str], options: Sequence[str]) -> str:
    blob = json.dumps({"packages": list(packages), "options": list(options),
                       **python_identity()}, sort_keys=True)
    return f"{kind}:{hashlib.sha256(blob.encode()).hexdigest()[:32]}"


def _pip_config_index() -> dict[str, str]:
    """pip's own index settings (env and config files), translated for uv.

    uv ignores pip.conf; a machine whose PyPI access goes through pip's config (an internal
    index, a wheelhouse) should work for rtenv's venvs exactly as it does for pip.
    """
    out: dict[str, str] = {}
    parser = configparser.ConfigParser()
    files = ["/etc/pip.conf", os.path.expanduser("~/.config/pip/pip.conf"),
             os.path.expanduser("~/.pip/pip.conf")]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    try:
        parser.read(files)
    except configparser.Error:
        return out
    section = parser["global"] if parser.has_section("global") else {}
    mapping = {"index-url": "UV_INDEX_URL", "extra-index-url": "UV_EXTRA_INDEX_URL",
               "find-links": "UV_FIND_LINKS"}
    for pip_key, uv_key in mapping.items():
        value = os.environ.get("PIP_" + pip_key.upper().replace("-", "_")) or section.get(pip_key)
        if value:
            sep = "," if uv_key == "UV_FIND_LINKS" else " "
            out[uv_key] = sep.join(value.split())
    if out:
        # pip considers every index equally; uv's default stops at the first index that knows
        # a package, which breaks exactly the mirrors pip's config describes
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return out


def uv_env(cache_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in _pip_config_index().items():
        env.setdefault(key, value)
    env["UV_CACHE_DIR"] = str(cache_dir)
    env.pop("VIRTUAL_ENV", None)
    env.setdefault("UV_NO_PROGRESS", "1")
    if extra:
        env.update(extra)
    return env


def run_uv(argv: list[str], env: Mapping[str, str], what: str) -> None:
    try:
        proc = subprocess.run(argv, env=dict(env), capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AgentError(f"{what} timed out after {BUILD_TIMEOUT_S}s") from exc
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise BuildError(f"{what} failed:\n{detail}",
                         hint="fix the requirements; nothing was kept from the failed build")


def build_venv(tree: Path, packages: Sequence[str], options: Sequence[str], *,
               cache_dir: Path, env_vars: Mapping[str, str] | None = None) -> None:
    """A relocatable uv venv in `tree` that still sees the node's own site-packages (ray)."""
    uv = uv_bin()
    env = uv_env(cache_dir, env_vars)
    venv = tree / "venv"
    run_uv([uv, "venv", "--quiet", "--relocatable", "--python", sys.executable, str(venv)], env,
         "uv venv")
    # the node's site-packages go last on sys.path: the venv's own packages win, ray stays
    # importable without cloning the base environment (Ray copies ~300 MB per env)
    site = next((venv / "lib").glob("python*/site-packages"))
    base = [p for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
            if Path(p).is_dir()]
    (site / "_rtenv_base.pth").write_text("".join(f"{p}\n" for p in sorted(base)))
    if packages:
        requirements = tree / "requirements.txt"
        requirements.write_text("".join(f"{p}\n" for p in packages))
        opts = [o for o in options if o not in _DROPPED_OPTIONS and o != CHECK_MARK]
        run_uv([uv, "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
              "-r", str(requirements), *opts], env,
             "uv pip install")
        if CHECK_MARK in options:  # Ray's pip_check/uv_check: refuse broken dependencies
            run_uv([uv, "pip", "check", "--python", str(venv / "bin" / "python")], env,
                 "uv pip check")


def venv_python(tree: Path) -> Path:
    return tree / "venv" / "bin" / "python"


def fetch_url(url: str, dest: Path, *, timeout: float = 120) -> None:
    """Download an http(s) package to `dest` (streamed)."""
    import requests

    try:
        with requests.get(url, stream=True, timeout=timeout) as resp:
            if resp.status_code != 200:  # noqa: PLR2004 - HTTP OK
                raise PackagingError(f"{url}: HTTP {resp.status_code}",
                                     hint="check that the URL is reachable from this node")
            with dest.open("wb") as out:
                for chunk in resp.iter_content(1 << 20):
                    out.write(chunk)
    except requests.RequestException as exc:
        raise PackagingError(f"{url}: {exc}", hint="check the URL and the network") from exc

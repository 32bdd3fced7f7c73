"""Builders: a uv virtual environment for `pip`/`uv`, and an unpacked package for working_dir and
py_modules. Each fills an empty directory the store later publishes by rename.
"""

from __future__ import annotations

import configparser
import contextlib
import functools
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import threading
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


@functools.cache
def node_site_dirs() -> tuple[str, ...]:
    """The node's site dirs a venv sees after its own packages (through `_rtenv_base.pth`):
    this interpreter's purelib/platlib, and the directory `ray` is imported from if elsewhere."""
    paths = sysconfig.get_paths()
    dirs = {paths["purelib"], paths["platlib"]}
    try:
        import importlib.util

        spec = importlib.util.find_spec("ray")  # locates the package, does not import it
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        dirs.add(str(Path(spec.origin).parent.parent))
    return tuple(sorted(d for d in dirs if Path(d).is_dir()))


@functools.cache
def ray_version() -> str | None:
    """The node's Ray version (from its metadata: Ray itself is not imported), None without Ray."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "__version__", None):
        return str(ray.__version__)
    from importlib import metadata

    try:
        return metadata.version("ray")
    except metadata.PackageNotFoundError:
        return None


def python_identity() -> dict[str, object]:
    """What a venv's key depends on besides its requirements: the interpreter (version, path,
    prefix), the node's site dirs the venv sees and the Ray version found there."""
    return {"python": sys.version.split()[0], "executable": sys.executable,
            "prefix": sys.prefix, "site": list(node_site_dirs()), "ray": ray_version()}


_FILE_OPTIONS = ("-r", "--requirement", "-c", "--constraint")


def referenced_files(lines: Sequence[str]) -> list[str]:
    """The files that `-r`/`-c` lines (`-r f`, `-rf`, `--requirement=f`) of `lines` name."""
    out = []
    for line in lines:
        text = line.strip()
        for opt in _FILE_OPTIONS:
            if text.startswith(opt):
                rest = text[len(opt):].lstrip("= ").strip()
                if rest and (len(opt) == 2 or text[len(opt)] in " =\t"):  # noqa: PLR2004 - a short option
                    out.append(rest)
                break
    return out


def files_digest(lines: Sequence[str], _seen: frozenset[str] = frozenset()) -> dict[str, str]:
    """The sha256 of every file `lines` reference (`-r`/`-c`), and of those they reference in
    turn: a venv's key covers what uv reads, not only the names. A missing file is `missing`
    (the build then fails with uv's message)."""
    out: dict[str, str] = {}
    for name in referenced_files(lines):
        path = os.path.abspath(os.path.expanduser(name))
        if path in _seen or path in out:
            continue
        if not os.path.exists(path):
            out[path] = "missing"
            continue
        from rtenv_cli.core.spec.loader import read_bytes

        # read as every requirements file is: a regular file, bounded (`-r /dev/zero`)
        data = read_bytes(path, "requirements file")
        out[path] = hashlib.sha256(data).hexdigest()
        nested = data.decode("utf-8", "replace").splitlines()
        base = os.path.dirname(path)  # uv resolves a nested -r against its file's directory
        nested = [_absolute(line, base) for line in nested]
        out.update(files_digest(nested, _seen | {path, *out}))
    return out


def _absolute(line: str, base: str) -> str:
    names = referenced_files([line])
    if not names or os.path.isabs(os.path.expanduser(names[0])):
        return line
    return f"-r {os.path.join(base, names[0])}"


def option_lines(options: Sequence[str]) -> list[str]:
    """argv tokens as lines: `-c`, `f` becomes `-c f`."""
    lines: list[str] = []
    for token in options:
        if lines and lines[-1] in _FILE_OPTIONS:
            lines[-1] = f"{lines[-1]} {token}"
        else:
            lines.append(token)
    return lines


def venv_key(kind: str, packages: Sequence[str], options: Sequence[str]) -> str:
    files = files_digest([*packages, *option_lines(options)])
    blob = json.dumps({"packages": list(packages), "options": list(options),
                       **python_identity(), "files": files},
                      sort_keys=True)
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


class BuildScope:
    """The builds one thread runs, stoppable from another: `cancel()` kills their processes
    (each in its own process group: uv and the build backends it starts) and makes every later
    `run_uv` of the thread fail, so the store discards the half-built directory.

        with BuildScope() as scope:   # in the building thread
            envs.get_or_create(...)
        scope.cancel()                # from anywhere
    """

    _local = threading.local()

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: set[subprocess.Popen[str]] = set()
        self.cancelled = False

    def __enter__(self) -> BuildScope:
        BuildScope._local.scope = self
        return self

    def __exit__(self, *exc: object) -> None:
        BuildScope._local.scope = None

    @classmethod
    def current(cls) -> BuildScope | None:
        return getattr(cls._local, "scope", None)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            procs = list(self._procs)
        for proc in procs:
            _kill_group(proc)

    def run(self, argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        with self._lock:
            if self.cancelled:
                raise AgentError("build cancelled", hint="nothing was kept; ask again")
            proc = subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            self._procs.add(proc)
        try:
            out, err = proc.communicate(timeout=BUILD_TIMEOUT_S)
        except BaseException:
            _kill_group(proc)
            proc.communicate()
            raise
        finally:
            with self._lock:
                self._procs.discard(proc)
        if self.cancelled:
            raise AgentError("build cancelled", hint="nothing was kept; ask again")
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_uv(argv: list[str], env: Mapping[str, str], what: str) -> None:
    scope = BuildScope.current()
    try:
        if scope is not None:
            proc = scope.run(argv, env)
        else:
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
    (site / "_rtenv_base.pth").write_text("".join(f"{p}\n" for p in node_site_dirs()))
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

"""RTE160/RTE161 (`--resolve`): do the pip/uv requirements resolve? Runs real `uv pip compile`."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic

TIMEOUT_S = 180
_OFFLINE_MARKERS = ("failed to fetch", "dns error", "error sending request", "connection refused",
                    "network is unreachable", "could not connect", "tcp connect error",
                    "offline", "timed out", "failed to resolve", "network was disabled")


def uv_command() -> list[str]:
    import shutil

    found = shutil.which("uv")
    if found:
        return [found]
    venv_uv = os.path.join(os.path.dirname(sys.executable), "uv")
    if os.path.exists(venv_uv):
        return [venv_uv]
    return [sys.executable, "-m", "uv"]


def compile_requirements(packages: list[str], options: list[str]) -> tuple[bool, str]:
    """(ok, uv's diagnostics) for `uv pip compile` of these requirement lines."""
    import subprocess  # here: only a rule that resolves needs a process
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rtenv-resolve-") as tmp:
        req = os.path.join(tmp, "requirements.in")
        with open(req, "w", encoding="utf-8") as f:
            f.write("\n".join(packages) + "\n")
        cmd = [*uv_command(), "pip", "compile", req, "--quiet", "--no-header", *options]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S,
                                  check=False, cwd=tmp)
        except FileNotFoundError:
            return False, "uv is not installed"
        except subprocess.TimeoutExpired:
            return False, f"uv pip compile timed out after {TIMEOUT_S} s"
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()


def _lines(value: Any) -> list[str]:
    return [p.strip() for p in value if isinstance(p, str) and p.strip() and
            not p.strip().startswith("#")]


def _requirements(ctx: Context) -> Iterator[tuple[str, tuple[str, ...], dict[str, Any]]]:
    """(field, JSON path, Ray's normalized `pip`/`uv` dict) of each set of requirements: Ray's
    own fields and rtenv's (`rtenv: {pip|uv: ...}`, built by rtenv's plugin)."""
    from rtenv_cli.core.errors import RtenvError
    from rtenv_cli.core.rayplugin import schema
    from rtenv_cli.core.spec.normalize import normalize_pip, normalize_uv

    normalized = ctx.pipeline.normalized or {}
    for field in ("pip", "uv"):
        if isinstance(normalized.get(field), dict):
            yield field, (field,), normalized[field]
    value = ctx.data.get(schema.FIELD) if isinstance(ctx.data, dict) else None
    if value is None:
        return
    try:
        spec = schema.parse(value)
        if spec.kind is None:
            return
        path = (schema.FIELD, spec.kind)
        norm = normalize_pip if spec.kind == "pip" else normalize_uv
        found = norm(spec.value, ctx.base_dir, path)
    except (RtenvError, ValueError, TypeError):
        return  # the rtenv field's own rule reports it
    if found is not None:
        yield f"{schema.FIELD}.{spec.kind}", path, found


def check_resolve(ctx: Context) -> Iterator[Diagnostic]:
    if not ctx.options.resolve:
        return
    for name, json_path, value in _requirements(ctx):
        field = name.rpartition(".")[2]
        packages = _lines(value.get("packages") or [])
        option_key = "pip_install_options" if field == "pip" else "uv_pip_install_options"
        options = [o for o in value.get(option_key) or [] if o.startswith(("--index-url",
                                                                          "--extra-index-url"))]
        if not packages:
            continue
        ok, output = compile_requirements(packages, options)
        if ok:
            continue
        tail = " | ".join(output.splitlines()[-4:]) or "no output"
        if any(marker in output.lower() for marker in _OFFLINE_MARKERS) or \
                output == "uv is not installed":
            yield ctx.diag("RTE161", f"could not check that `{name}` resolves: {tail}",
                           json_path, hint="connect to a package index (or set UV_INDEX_URL) "
                           "and rerun with --resolve")
        else:
            yield ctx.diag("RTE160", f"`{name}` requirements do not resolve: {tail}", json_path,
                           hint="fix the conflicting pins; every node would fail the install")


CHECKS = (check_resolve,)

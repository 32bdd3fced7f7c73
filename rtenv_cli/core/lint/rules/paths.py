"""RTE110 paths that only exist next to the file, RTE111 `~`, RTE112 working_dir is the CWD."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.spec.normalize import is_path


def local_paths(data: Mapping[str, Any]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(json path, path string) of every local path Ray reads on the client."""
    wd = data.get("working_dir")
    if isinstance(wd, str) and is_path(wd):
        yield ("working_dir",), wd
    mods = data.get("py_modules")
    if isinstance(mods, list):
        for i, mod in enumerate(mods):
            if isinstance(mod, str) and is_path(mod):
                yield ("py_modules", i), mod
    for field in ("pip", "uv"):
        value = data.get(field)
        if isinstance(value, str):
            yield (field,), value
        elif isinstance(value, Mapping) and isinstance(value.get("packages"), str):
            yield (field, "packages"), value["packages"]
    conda = data.get("conda")
    if isinstance(conda, str) and Path(conda).suffix in (".yaml", ".yml"):
        yield ("conda",), conda


def check_paths(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    for path, value in local_paths(ctx.data):
        if value.startswith("~"):
            yield ctx.diag("RTE111", f"`{value}`: Ray does not expand `~`; this is a directory "
                           "literally named `~`", path, prefer="value",
                           hint="write the absolute path, or a path relative to where you run "
                           "the command")
            continue
        if path == ("working_dir",) and value in ("", ".", "./"):
            if _cwd_surprises(ctx):
                yield ctx.diag("RTE112", f"working_dir `{value}` packages the directory the "
                               f"command runs from ({ctx.base_dir}), not the file's "
                               f"({ctx.file_dir})", path, prefer="value",
                               hint="run from the project directory, or name it explicitly")
            continue
        if Path(value).is_absolute() or ctx.file_dir is None:
            continue
        at_cwd = ctx.base_dir / value
        at_file = ctx.file_dir / value
        if ctx.file_dir.resolve() == ctx.base_dir.resolve() or _exists(at_cwd):
            continue
        if _exists(at_file):
            yield ctx.diag(
                "RTE110", f"`{value}` exists next to the file ({at_file}) but Ray resolves it "
                f"against the current directory ({at_cwd}), where it does not exist", path,
                prefer="value",
                hint=f"run from {ctx.file_dir}, pass --base-dir {ctx.file_dir}, or write the path "
                "relative to where you submit")


def _cwd_surprises(ctx: Context) -> bool:
    """`working_dir: .` is the usual way to ship the project the file sits in; it is worth a
    note only when the command runs elsewhere (another directory than the file's, or $HOME or
    `/`, which package everything below them)."""
    cwd = ctx.base_dir.resolve()
    if cwd in (Path.home().resolve(), Path(cwd.anchor)):
        return True
    return ctx.file_dir is not None and ctx.file_dir.resolve() != cwd


def _exists(path: Path) -> bool:
    """Whether `path` exists; a name the system cannot look up (over NAME_MAX, say) does not
    (Ray's own check of it is RTE003's finding, with the OS's words)."""
    try:
        return path.exists()
    except OSError:
        return False


CHECKS = (check_paths,)

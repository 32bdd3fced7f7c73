"""What the agent refuses to read for an HTTP client: paths on its own machine.

A create over HTTP comes from another process, maybe another user's. Whatever it names on the
agent's disk would be read as the agent's user: a requirements file (`-r /root-only/file`,
whose lines uv quotes back in its errors), a local sdist (whose `setup.py` runs), a
`file://` archive. So a create names only what it uploaded (`gcs://`), what is on the network
(`https://`, a package index), or a `file://` archive under a directory the agent was told
to share (`--allow-file-root`). `rtenv run --address` and `rtenv push --to` upload local
working_dirs and py_modules and send requirement files' lines, so they never need more.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import ForbiddenError

# uv pip install / pip install options whose value is a file or directory
_PATH_OPTIONS = frozenset({
    "--requirement", "--constraint", "--constraints", "--editable", "--find-links",
    "--override", "--overrides", "--build-constraint", "--build-constraints", "--config-file",
    "--target", "--prefix", "--root", "--src", "--cache-dir",
})
_SHORT_PATH_OPTION = re.compile(r"^-[rcef]")  # -r, -c, -e, -f, attached or not
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_ARCHIVES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz")
_ENV_PREFIXES = ("UV_", "PIP_")  # read by uv while it builds (env_vars reach the build)
_HINT = ("upload it instead: `rtenv run --address` and `rtenv push --to` push local "
         "working_dirs and py_modules and send requirement files' lines; a shared directory "
         "of archives can be allowed with `rtenv agent --allow-file-root DIR`")


def _local_word(word: str, roots: Sequence[Path]) -> bool:
    """A word of a requirement or option that names something on this machine (a file://
    URL under one of `roots` is allowed)."""
    if not word:
        return False
    scheme = _SCHEME.match(word)
    if scheme is not None and len(scheme.group(1)) > 1:  # a URL (one letter: a drive, C:\)
        if scheme.group(1).lower() == "file":
            return not _file_uri_allowed(word, roots)
        return scheme.group(1).lower().endswith("file")  # git+file:
    return (word.startswith((".", "~", "/", "\\")) or "/" in word or "\\" in word
            or word.lower().endswith(_ARCHIVES))  # an archive's name: a file in the cwd


def _local_requirement(text: str, roots: Sequence[Path] = ()) -> bool:
    for word in re.split(r"[\s=,]+", text.strip()):
        if word in _PATH_OPTIONS or _SHORT_PATH_OPTION.match(word) or _local_word(word, roots):
            return True
    return False


def _requirements(field: str, value: Any) -> Iterable[tuple[str, str]]:
    """(where, text) of every requirement and option of a `pip`/`uv` value."""
    if isinstance(value, str):  # Ray reads a string as a requirements file's path
        yield field, f"-r {value}"
        return
    if isinstance(value, Mapping):  # a shape Ray refuses is left to the normaliser (422)
        for key in ("pip_install_options", "uv_pip_install_options"):
            opts = value.get(key)
            if isinstance(opts, list):
                for n, opt in enumerate(opts):
                    yield f"{field}.{key}[{n}]", str(opt)
        field, value = f"{field}.packages", value.get("packages")
    if isinstance(value, list):
        for n, item in enumerate(value):
            yield f"{field}[{n}]", str(item)


def _file_uri_allowed(uri: str, roots: Sequence[Path]) -> bool:
    if not roots or not uri.startswith("file://"):
        return False
    path = Path(uri.removeprefix("file://")).resolve()
    return any(path.is_relative_to(root.resolve()) for root in roots)


def refuse_local_paths(runtime_env: Mapping[str, Any], file_roots: Sequence[Path] = ()) -> None:
    """Raise ForbiddenError (403) naming the first field of `runtime_env` that points at this
    machine's files (see the module doc)."""
    def refuse(where: str, what: str) -> None:
        raise ForbiddenError(f"{where}: the rtenv agent does not read local paths for a client "
                             f"over HTTP ({what[:200]!r})", hint=_HINT)

    for field in ("pip", "uv"):
        if field in runtime_env:
            for where, text in _requirements(field, runtime_env[field]):
                if _local_requirement(text, file_roots):
                    refuse(where, text)
    uris: list[tuple[str, Any]] = [("working_dir", runtime_env.get("working_dir"))]
    modules = runtime_env.get("py_modules")
    if isinstance(modules, list):
        uris += [(f"py_modules[{n}]", m) for n, m in enumerate(modules)]
    for where, uri in uris:
        if not isinstance(uri, str):
            continue
        scheme = _SCHEME.match(uri)
        if scheme is None or len(scheme.group(1)) == 1:
            refuse(where, uri)  # a bare path: the client's, not the agent's
        elif uri.lower().startswith("file:") and not _file_uri_allowed(uri, file_roots):
            refuse(where, uri)
    env_vars = runtime_env.get("env_vars")
    if isinstance(env_vars, Mapping):
        for key, value in env_vars.items():
            if str(key).upper().startswith(_ENV_PREFIXES) and _local_requirement(str(value),
                                                                                file_roots):
                refuse(f"env_vars.{key}", str(value))

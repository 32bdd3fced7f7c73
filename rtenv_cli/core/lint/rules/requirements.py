"""pip/uv requirement rules: RTE140 ray pins, RTE141 duplicates, RTE142 options as packages,
RTE143 git+ URLs, RTE144 unpinned heavy packages, RTE145 requirements-file noise, RTE146
pip_version/uv_version without an operator, RTE147 import names that are not installable,
RTE148 the working_dir's own project installed again, RTE149 a stray quote in a requirement.
The pip lists of a conda environment (`conda.dependencies[].pip`, inline or in the YAML file)
get the same rules: conda hands them to pip."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.lint.context import Context
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.spec import model

HEAVY = frozenset({"torch", "torchvision", "torchaudio", "tensorflow", "tensorflow-gpu", "jax",
                   "jaxlib", "vllm", "xformers", "deepspeed", "flash-attn", "tensorrt",
                   "triton", "mxnet", "paddlepaddle", "onnxruntime-gpu", "cupy-cuda12x"})
# import name -> (the distribution to install, what installing the import name does)
NOT_INSTALLABLE = {
    "sklearn": ("scikit-learn", "the `sklearn` package on PyPI is a stub that refuses to "
                "install"),
    "pytorch": ("torch", "the `pytorch` package on PyPI is a stub that refuses to install"),
    "cv2": ("opencv-python-headless", "no package named `cv2` exists"),
    "pil": ("pillow", "no package named `PIL` exists"),
    "yaml": ("pyyaml", "no package named `yaml` exists"),
    "skimage": ("scikit-image", "the `skimage` package on PyPI is a stub that refuses to "
                "install"),
    "tensorflow-gpu": ("tensorflow", "`tensorflow-gpu` was removed: its stub refuses to "
                       "install (GPU support is in `tensorflow` itself)"),
}
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$")


@dataclass(frozen=True)
class Requirement:
    text: str
    path: tuple[Any, ...]  # where to point (the list item, or the file field)
    origin: str | None  # "requirements.txt:3" when read from a file


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _from_file(ctx: Context, value: str, path: tuple[Any, ...]) -> list[Requirement]:
    from rtenv_cli.core.spec.normalize import RuntimeEnvValueError, requirement_lines

    file = Path(value) if Path(value).is_absolute() else ctx.base_dir / value
    try:
        lines = requirement_lines(file, path)
    except (RuntimeEnvValueError, ValueError):  # Ray's own check of it is the finding
        return []
    return [Requirement(line, path, f"{value}:{i + 1}") for i, line in enumerate(lines)]


def requirements(ctx: Context) -> dict[str, list[Requirement]]:
    out: dict[str, list[Requirement]] = {}
    if not isinstance(ctx.data, Mapping):
        return out
    for field in ("pip", "uv"):
        value = ctx.data.get(field)
        reqs: list[Requirement] = []
        if isinstance(value, str):
            reqs = _from_file(ctx, value, (field,))
        elif isinstance(value, list):
            reqs = [Requirement(v, (field, i), None) for i, v in enumerate(value)
                    if isinstance(v, str)]
        elif isinstance(value, Mapping):
            packages = value.get("packages")
            if isinstance(packages, str):
                reqs = _from_file(ctx, packages, (field, "packages"))
            elif isinstance(packages, list):
                reqs = [Requirement(v, (field, "packages", i), None)
                        for i, v in enumerate(packages) if isinstance(v, str)]
        if reqs:
            out[field] = reqs
    conda = _conda_pip(ctx)
    if conda:
        out["conda"] = conda
    return out


def _conda_pip(ctx: Context) -> list[Requirement]:
    """The `pip:` lists under a conda environment's dependencies (inline or its YAML file)."""
    value = ctx.data.get("conda")
    origin = None
    if isinstance(value, str) and Path(value).suffix in (".yaml", ".yml"):
        from rtenv_cli.core.spec.loader import load_path

        file = Path(value) if Path(value).is_absolute() else ctx.base_dir / value
        loaded = load_path(file)
        value, origin = (loaded.data, value) if loaded.error is None else (None, None)
    deps = value.get("dependencies") if isinstance(value, Mapping) else None
    out: list[Requirement] = []
    for i, dep in enumerate(deps if isinstance(deps, list) else []):
        pips = dep.get("pip") if isinstance(dep, Mapping) else None
        for j, item in enumerate(pips if isinstance(pips, list) else []):
            if isinstance(item, str):
                path = ("conda",) if origin else ("conda", "dependencies", i, "pip", j)
                out.append(Requirement(item, path, f"{origin}: pip[{j}]" if origin else None))
    return out


def installed_ray_version(ctx: Context) -> str:
    if ctx.options.ray_version:
        return ctx.options.ray_version
    # a directory listing instead of importlib.metadata, whose import costs more
    # (benchmarks/results/fastpaths.json: "import importlib.metadata")
    import os
    import sys

    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith("ray-") and name.endswith(".dist-info"):
                return name[len("ray-"):-len(".dist-info")]
    return model.RAY_VERSION


def _where(req: Requirement) -> str:
    return f" ({req.origin})" if req.origin else ""


def check_requirements(ctx: Context) -> Iterator[Diagnostic]:
    for field, reqs in requirements(ctx).items():
        seen: dict[str, Requirement] = {}
        noise = [r for r in reqs if r.origin and (not r.text.strip() or
                                                  r.text.lstrip().startswith("#"))]
        if noise:
            yield ctx.diag("RTE145", f"{len(noise)} comment/blank line(s) of the requirements "
                           f"file become packages in the runtime_env ({noise[0].origin})",
                           noise[0].path, prefer="value",
                           hint="Ray reads the file verbatim; keep only requirement lines")
        for req in reqs:
            text = req.text.strip()
            if not text or text.startswith("#"):
                continue
            found = list(_line_problems(ctx, req, text))
            yield from found
            if any(d.code == "RTE148" for d in found):
                continue
            if text.startswith("-"):
                yield from _option(ctx, field, req, text)
                continue
            if "git+" in text:
                yield ctx.diag("RTE143", f"`{text}` needs git and access to the repository on "
                               f"every node{_where(req)}", req.path, prefer="value",
                               hint="publish a wheel or pin a released version")
            match = None if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) else _REQ.match(text)
            if not match:  # a bare URL (git+https://...) names no package here
                continue
            name = canonical(match.group(1))
            spec = match.group(3).split(";")[0].split("#")[0].strip()
            if name in seen and not _extras_only(seen[name].text.strip(), text):
                same = seen[name].text.strip() == text
                yield ctx.diag("RTE141", f"`{name}` is listed twice{_where(req)}: "
                               + ("Ray drops the exact duplicate" if same else
                                  f"`{seen[name].text.strip()}` and `{text}` may conflict"),
                               req.path, prefer="value", hint="keep one line per package")
            first = name not in seen
            seen[name] = req
            if first and name in NOT_INSTALLABLE:
                yield _not_installable(ctx, req, match.group(1), name)
            if name == "ray" and first:
                yield from _ray_pin(ctx, req, text, spec, field)
            elif first and name in HEAVY and "==" not in spec and "@" not in spec:
                yield ctx.diag("RTE144", f"`{text}` is not pinned: nodes installing at "
                               f"different times can get different versions{_where(req)}",
                               req.path, prefer="value", hint=f"pin it: `{match.group(1)}==X.Y.Z`")
    yield from _versions(ctx)


def _option(ctx: Context, field: str, req: Requirement, text: str) -> Iterator[Diagnostic]:
    """A requirement line that is a pip option."""
    if field == "conda":
        return  # conda writes its pip list to a requirements file: options are fine there
    option, _, argument = text.partition(" ")
    option = option.split("=", 1)[0]
    if option in _FILE_OPTIONS:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", argument.strip().split("=", 1)[-1]):
            return  # pip (and uv) fetch a requirements URL themselves
        yield ctx.diag("RTE142", f"`{text}` names a file that must exist on every node: "
                       f"pip reads it there, not on this machine{_where(req)}",
                       req.path, prefer="value",
                       hint="inline its requirements, or pass the file itself as "
                       f"`{field}: path/to/requirements.txt`")
        return
    if option in REQUIREMENTS_FILE_OPTIONS:
        return  # Ray writes the list to a requirements file, where pip reads this option
    opt = "pip_install_options" if field == "pip" else "uv_pip_install_options"
    yield ctx.diag("RTE142", f"`{text}` is a pip option, not a package{_where(req)}",
                   req.path, prefer="value", hint=f"move it to `{field}.{opt}`")


# pip options a requirements file may hold (pip's `req_file.SUPPORTED_OPTIONS`; uv reads the
# same ones): Ray writes the packages list to a requirements file, so these are fine there
REQUIREMENTS_FILE_OPTIONS = frozenset({
    "-i", "--index-url", "--extra-index-url", "--no-index", "-f", "--find-links",
    "--trusted-host", "--pre", "--prefer-binary", "--only-binary", "--no-binary",
    "--require-hashes", "--use-feature", "-e", "--editable", "-r", "--requirement", "-c",
    "--constraint",
})
_FILE_OPTIONS = frozenset({"-r", "--requirement", "-c", "--constraint"})


def _line_problems(ctx: Context, req: Requirement, text: str) -> Iterator[Diagnostic]:
    """RTE149 a stray quote, RTE148 the working_dir's own project."""
    stray = _stray_quote(text)
    if stray:
        yield ctx.diag("RTE149", f"`{text}` holds a stray {stray}: pip reads it as part of the "
                       f"requirement and the install fails on every node{_where(req)}",
                       req.path, prefer="value",
                       hint="remove the quote (YAML quotes go around the whole item)")
    own = _installs_own_project(ctx, text)
    if own:
        yield ctx.diag("RTE148", f"`{text}` {own}{_where(req)}", req.path, prefer="value",
                       hint="drop it: working_dir is on every worker's sys.path; list only the "
                       "project's dependencies")


def _stray_quote(text: str) -> str | None:
    """A quote in the requirement itself (`...#egg=tool"`); markers may quote their values."""
    head = text.split(";", 1)[0]
    if '"' not in head and "'" not in head:
        if not text.count('"') % 2 and not text.count("'") % 2:
            return None
        head = text
    first = min(i for i in (head.find('"'), head.find("'")) if i >= 0)
    return "double quote" if head[first] == '"' else "single quote"


def _installs_own_project(ctx: Context, text: str) -> str | None:
    """What is wrong when `text` installs the project the local working_dir already ships:
    `-e .` / `.` (pip runs in an empty directory on the node) or the project's own name (from
    the working_dir's pyproject.toml: pip fetches that name from the index)."""
    target = text
    for flag in ("--editable=", "--editable ", "-e "):
        if target.startswith(flag):
            target = target[len(flag):].strip()
            break
    if target.split("[", 1)[0] in (".", "./"):
        return ("installs `.` of the node's pip directory (an empty folder Ray creates), not "
                "your working_dir: the install fails")
    name = _REQ.match(target)
    project = _project_name(ctx)
    if name is None or project is None or canonical(name.group(1)) != project or \
            "://" in target:
        return None
    return (f"installs `{project}` from the package index, though the working_dir already "
            f"ships the project `{project}` (its pyproject.toml): another version, or none")


def _project_name(ctx: Context) -> str | None:
    """The `[project] name` of the local working_dir's pyproject.toml, canonical."""
    if not isinstance(ctx.data, Mapping) or not isinstance(ctx.data.get("working_dir"), str):
        return None
    from rtenv_cli.core.spec.normalize import is_path

    wd = ctx.data["working_dir"]
    if not is_path(wd):
        return None
    root = Path(wd) if Path(wd).is_absolute() else ctx.base_dir / wd
    try:
        text = (root / "pyproject.toml").read_text()
    except (OSError, ValueError):
        return None
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        name = tomllib.loads(text).get("project", {}).get("name")
    except (tomllib.TOMLDecodeError, AttributeError):
        return None
    return canonical(name) if isinstance(name, str) else None


def _extras_only(first: str, second: str) -> bool:
    """`pkg[a]==1.0` beside `pkg[b]==1.0` (or an unversioned one): pip merges the extras."""
    a, b = _REQ.match(first), _REQ.match(second)
    if a is None or b is None or (a.group(2) or "") == (b.group(2) or ""):
        return False
    spec_a, spec_b = (m.group(3).split(";")[0].split("#")[0].replace(" ", "") for m in (a, b))
    return spec_a == spec_b or not spec_a or not spec_b


def _not_installable(ctx: Context, req: Requirement, written: str, name: str) -> Diagnostic:
    right, why = NOT_INSTALLABLE[name]
    return ctx.diag("RTE147", f"`{written}` is an import name, not the package that provides "
                    f"it: {why}{_where(req)}", req.path, prefer="value",
                    hint=f"install `{right}` (the module is still imported as `{written}`)")


def _ray_pin(ctx: Context, req: Requirement, text: str, spec: str, field: str
             ) -> Iterator[Diagnostic]:
    version = installed_ray_version(ctx)
    pinned = re.match(r"^===?\s*([0-9][^,\s]*)$", spec)
    refusal = (f"Ray puts `ray=={version}` first in this conda pip list, so pip cannot "
               "resolve both" if field == "conda" else "the node refuses to change Ray's version")
    if pinned and pinned.group(1) != version:
        # Ray accepts the file at submit: the failure comes on the node, at install time
        when = ("conda's pip install fails on every node" if field == "conda" else
                f"every node installs Ray {pinned.group(1)} into the job's environment, then "
                "the runtime_env setup fails ('Changing the ray version is not allowed')")
        yield ctx.diag("RTE140", f"`{text}` pins Ray {pinned.group(1)}; on a Ray {version} "
                       f"cluster {refusal}: {when}, after the install, for every worker"
                       f"{_where(req)}", req.path, prefer="value",
                       hint="remove `ray` from the requirements (the cluster's Ray is used)")
    else:
        yield ctx.diag("RTE140", f"`{text}`: Ray is already installed on the cluster "
                       f"({version}); listing it can only conflict{_where(req)}", req.path,
                       prefer="value", hint="remove `ray` from the requirements")


def _versions(ctx: Context) -> Iterator[Diagnostic]:
    if not isinstance(ctx.data, Mapping):
        return
    for field, key in (("pip", "pip_version"), ("uv", "uv_version")):
        value = ctx.data.get(field)
        if isinstance(value, Mapping) and isinstance(value.get(key), str):
            version = value[key].strip()
            if version and version[0] not in "=<>!~;":
                tool = "pip" if field == "pip" else "uv"
                yield ctx.diag("RTE146", f"{key} `{version}` has no operator: Ray installs "
                               f"`{tool}{version}`", (field, key), prefer="value",
                               hint=f"write \"=={version}\"")


CHECKS = (check_requirements,)

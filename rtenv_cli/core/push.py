"""`rtenv push`: validate, package every local working_dir / py_modules entry, upload what the
target lacks, and return the runtime_env with local paths replaced by URIs.

The URI is computed from the scan and the digest cache first; only when the target lacks it is
the zip built and sent, so an unchanged tree costs stats plus one existence check.
"""

from __future__ import annotations

import copy
import gc
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import ConfigError, PackagingError
from rtenv_cli.core.transport.base import PIN_SECONDS, RemoteServing, Target

Progress = Callable[[str, int], AbstractContextManager[Callable[[int], None]]]

# Python's cyclic garbage collector is paused while a push scans and publishes: a tree of 10k
# files makes some 10^5 objects (entries, digests, records) that hold no cycles and go by
# reference counting, and the collector's passes over them are a good part of a re-push
# (benchmarks/results/trees.json: "ablation: re-push in process, the garbage collector on").
# What cycles the push makes are collected once it ends. A module switch, for that row.
PAUSE_GC = True


@contextmanager
def _gc_paused() -> Iterator[None]:
    if not PAUSE_GC or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass(frozen=True)
class PackagePlan:
    field: str  # "working_dir" or "py_modules[2]"
    json_path: tuple[Any, ...]
    source: Path
    kind: str  # "working_dir" | "py_module"
    excludes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PackageOutcome:
    field: str
    source: str
    uri: str  # what the runtime_env now says
    ray_uri: str  # Ray's gcs:// name for the content
    file_count: int
    total_bytes: int
    zip_bytes: int | None = None
    uploaded: bool = False
    target: str = ""
    staged: bool = False
    size_tree: tuple[tuple[str, int, int], ...] = ()
    ignored_py_dirs: tuple[tuple[str, str], ...] = ()  # (dir, rule)
    warnings: tuple[str, ...] = ()
    tree: dict[str, Any] | None = None  # the tree path's PublishResult (trees/publish.py)

    @property
    def bytes_sent(self) -> int:
        if self.tree is not None:
            return int(self.tree["bytes_sent"])
        return (self.zip_bytes or 0) if self.uploaded else 0

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "source": self.source, "uri": self.uri,
                "ray_uri": self.ray_uri, "file_count": self.file_count,
                "total_bytes": self.total_bytes, "zip_bytes": self.zip_bytes,
                "bytes_sent": self.bytes_sent, "tree": self.tree,
                "uploaded": self.uploaded, "target": self.target, "staged": self.staged,
                "size_tree": [{"path": p, "bytes": b, "files": f} for p, b, f in self.size_tree],
                "ignored_py_dirs": [{"path": p, "rule": r} for p, r in self.ignored_py_dirs],
                "warnings": list(self.warnings)}


@dataclass(frozen=True)
class PushResult:
    packages: tuple[PackageOutcome, ...]
    runtime_env: dict[str, Any]
    target: str
    dry_run: bool
    pin_seconds: int | None = None
    notes: tuple[str, ...] = field(default=())
    document: str | None = None  # a Serve config or KubeRay manifest written back (push_carrier)
    path: str | None = "zip"  # "tree": content-addressed files through rtenv's plugin; "zip": Ray's

    @property
    def bytes_uploaded(self) -> int:
        return sum(p.bytes_sent for p in self.packages)

    def to_dict(self) -> dict[str, Any]:
        return {"packages": [p.to_dict() for p in self.packages], "runtime_env": self.runtime_env,
                "target": self.target, "dry_run": self.dry_run, "pin_seconds": self.pin_seconds,
                "bytes_uploaded": self.bytes_uploaded, "path": self.path,
                "notes": list(self.notes), "document": self.document}


def load_input(path: Path | str | None, cwd: Path | None = None,
               base_dir: Path | None = None) -> tuple[dict[str, Any], Path, str]:
    """(runtime_env, base_dir, label) for a runtime_env file or a directory (= working_dir).

    `path` defaults to runtime_env.yaml in `cwd` (the current directory). Relative paths in the
    runtime_env resolve against `base_dir`, by default `cwd`: what `ray job submit
    --runtime-env FILE` does, whatever directory FILE is in.
    """
    cwd = Path.cwd() if cwd is None else cwd
    base = base_path(cwd, base_dir)
    if path is None:
        from rtenv_cli.core.spec.locate import default_file

        path = default_file(cwd)
        if path is None:
            raise ConfigError("no runtime_env.yaml in the current directory",
                              hint="pass a runtime_env file or a directory: rtenv push src/")
    full = cwd / path
    if full.is_dir():
        return {"working_dir": os.path.abspath(full)}, base, str(path)
    if not full.exists():
        raise ConfigError(f"{path}: no such file or directory",
                          hint="pass a runtime_env YAML/JSON file or a directory")
    from rtenv_cli.core.spec.runtime_env_file import load_runtime_env_file

    return load_runtime_env_file(full).runtime_env, base, str(path)


def base_path(cwd: Path | None, base_dir: Path | None) -> Path:
    """What relative paths in a runtime_env resolve against: `base_dir`, by default `cwd`."""
    cwd = Path.cwd() if cwd is None else cwd
    return Path(os.path.abspath(cwd if base_dir is None else cwd / base_dir))


def validate(data: dict[str, Any], base_dir: Path, label: str, env: Mapping[str, str]) -> list[str]:
    """Refuse what Ray would refuse; return warnings. Size findings are push's own business."""
    from rtenv_cli.core.lint.diagnostic import Severity
    from rtenv_cli.core.lint.engine import ValidateOptions, validate_runtime_env
    from rtenv_cli.core.spec.fields import names
    from rtenv_cli.core.spec.model import PLACEHOLDER_URI

    # Local working_dir/py_modules are packaged (and checked) by push itself with Ray's exact
    # rules; the validator would walk and hash each tree again (seconds on a 10k-file tree), so
    # it sees them as already-uploaded packages.
    data = copy.deepcopy(data)
    for plan in package_runtime_env(data, base_dir):
        _set(data, plan.json_path, PLACEHOLDER_URI)
    report = validate_runtime_env(data, base_dir=base_dir, source=label,
                                  options=ValidateOptions.before_submit("ray-init", env))
    placeholder = PLACEHOLDER_URI.removeprefix("gcs://").removesuffix(".zip")
    packaged = names(where="push", value="use")  # working_dir, py_modules and their excludes

    def ours(d: Any) -> bool:  # findings about packaging, which push reports itself
        return d.code in ("RTE150", "RTE151") or ((bool(d.json_path) and d.json_path[0] in
                                                   packaged and placeholder in d.message)
                                                  or d.json_path[:1] == ("excludes",))

    errors = [d for d in report.diagnostics if d.severity == Severity.ERROR and not ours(d)]
    if errors:
        first = errors[0]
        where = ".".join(str(x) for x in first.json_path) or label
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"{label}: {where}: {first.message}{more}", path=label,
                          hint=first.hint or f"run `rtenv validate {label}` for all findings")
    return [f"{d.code}: {d.message}" for d in report.diagnostics
            if d.severity == Severity.WARNING and not ours(d)]


def package_runtime_env(runtime_env: Mapping[str, Any], base_dir: Path,
                        outputs: Sequence[Path] = ()) -> list[PackagePlan]:
    """Every local working_dir / py_modules entry of `runtime_env`: the one source discovery of
    push, watch and run.

    Relative paths resolve against `base_dir` and every source is made absolute and normalised
    (`../libs/helper` names the directory itself, as watchers report it). `outputs` are files
    rtenv writes (push -o): one that lies inside a source is excluded from its package, so
    writing it never changes the package's URI.
    """
    excludes = runtime_env.get("excludes") or ()
    if not isinstance(excludes, str) and not (
            isinstance(excludes, list | tuple) and all(isinstance(p, str) for p in excludes)):
        raise ConfigError(f"runtime_env['excludes'] must be of type List[str], got "
                          f"{type(excludes).__name__} (Ray refuses it)",
                          hint='write e.g. excludes: ["*.log", "data/"]')
    excludes = tuple(excludes.split(",") if isinstance(excludes, str) else excludes)
    wanted: list[tuple[str, tuple[Any, ...], str, str]] = []
    wd = runtime_env.get("working_dir")
    if isinstance(wd, str) and "://" not in wd:
        wanted.append(("working_dir", ("working_dir",), wd, "working_dir"))
    mods = runtime_env.get("py_modules")
    if isinstance(mods, list):
        wanted += [(f"py_modules[{i}]", ("py_modules", i), m, "py_module")
                   for i, m in enumerate(mods) if isinstance(m, str) and "://" not in m]
    plans = []
    for label, json_path, value, kind in wanted:
        source = Path(os.path.abspath(base_dir / value))
        own = tuple(_exclude_pattern(source, out) for out in outputs)
        plans.append(PackagePlan(label, json_path, source, kind,
                                 excludes + tuple(p for p in own if p is not None)))
    return plans


def require_source(plan: PackagePlan) -> None:
    """ConfigError unless the plan's source exists."""
    if not plan.source.exists():
        raise ConfigError(f"{plan.field}: {plan.source}: no such file or directory",
                          path=str(plan.source),
                          hint="relative paths resolve against the current directory, as in "
                          "`ray job submit --runtime-env`; --base-dir changes it")


def _exclude_pattern(source: Path, output: Path) -> str | None:
    """An anchored gitignore pattern matching exactly `output` inside `source`, or None."""
    out = os.path.abspath(output)
    for root, path in ((str(source), out), (os.path.realpath(source), os.path.realpath(out))):
        rel = os.path.relpath(path, root)
        if rel not in (".", "..") and not rel.startswith(".." + os.sep):
            return "/" + re.sub(r"([\\*?\[\]!#])", r"\\\1", rel.replace(os.sep, "/"))
    return None


def _check_collisions(found: list[tuple[PackagePlan, str]]) -> None:
    seen: dict[str, PackagePlan] = {}
    for plan, uri in found:
        other = seen.get(uri)
        if other is not None and (other.source, other.kind) != (plan.source, plan.kind):
            raise PackagingError(
                f"{other.field} ({other.source}) and {plan.field} ({plan.source}) have the same "
                f"content and so the same Ray URI {uri}; Ray would unpack one for both "
                "(e.g. `import otherlib` fails)", path=str(plan.source),
                hint="make their contents differ (e.g. a module docstring naming it), or "
                "drop one of them")
        seen[uri] = plan


def _scan(plan: PackagePlan, env: Mapping[str, str],
          progress: Progress | None = None) -> tuple[Any, str, Any]:
    from rtenv_cli.core.packaging.hashing import (
        digest_entries,
        file_source_kind,
        package_uri,
        scan_uri,
    )
    from rtenv_cli.core.packaging.walk import scan_package

    if plan.source.is_file() and file_source_kind(plan.source, plan.kind) != "py":  # type: ignore[arg-type]
        return None, package_uri(plan.source, kind=plan.kind), None  # type: ignore[arg-type]
    scan = scan_package(plan.source, kind=plan.kind,  # type: ignore[arg-type]
                        excludes=plan.excludes, env=env)
    if scan.root_excluded:
        from rtenv_cli.core.packaging.build import build_package

        build_package(plan.source, kind=plan.kind, excludes=plan.excludes,  # type: ignore[arg-type]
                      env=env)  # raises the explanation
    # a cold tree is read whole to hash it (the digest cache makes a warm one cost stats)
    with _progress(progress, f"hashing {plan.field}", scan.total_bytes) as advance:
        digests = digest_entries(scan.entries, on_progress=advance)
    if scan.single_file:
        from rtenv_cli.core.packaging.hashing import package_uri as _pu

        return scan, _pu(plan.source, kind=plan.kind), digests  # type: ignore[arg-type]
    return scan, scan_uri(scan, digests), digests


def _progress(progress: Progress | None, label: str, total: int
              ) -> AbstractContextManager[Callable[[int], None]]:
    if progress is None:
        return nullcontext(lambda _n: None)
    return progress(label, total)


def _publish(  # noqa: PLR0917 - internal helper, one call site
        plan: PackagePlan, scan: Any, uri: str, target: Target, stage: Target | None,
             env: Mapping[str, str], progress: Progress | None,
             digests: Any = None) -> tuple[str, int | None, bool, bool, str]:
    """(published uri, zip bytes, uploaded, staged, target label)."""
    from rtenv_cli.core.packaging.build import build_scan, fits_stored
    from rtenv_cli.core.packaging.sizes import offenders
    from rtenv_cli.core.paths import rtenv_home

    if target.exists(uri):
        return target.published_uri(uri), None, False, False, target.label
    if scan is None:  # a wheel or a local archive: sent as is
        with _progress(progress, f"uploading {plan.field}", plan.source.stat().st_size) as adv:
            target.upload(uri, plan.source, on_progress=adv)
        return target.published_uri(uri), plan.source.stat().st_size, True, False, target.label
    dest = rtenv_home() / "build"
    # stored as Ray stores it, unless it would not fit: deflate is what makes it fit
    compress = fits_stored(scan, target.layout, target.max_upload_bytes) is False
    with _progress(progress, f"packaging {plan.field}", scan.total_bytes) as adv:
        built = build_scan(scan, dest_dir=dest, layout=target.layout, on_progress=adv,
                           digests=digests, compress=compress)
    try:
        limit = target.max_upload_bytes
        if limit is not None and built.zip_bytes > limit:
            if stage is None:
                from rtenv_cli.core.transport.ray_dashboard import too_large_error

                raise too_large_error(uri, built.zip_bytes, limit, offenders(scan), target.label,
                                      route=getattr(target, "larger_route", ""))
            if not stage.exists(uri):
                if stage.layout != built.layout:
                    built.path.unlink(missing_ok=True)
                    built = build_scan(scan, dest_dir=dest, layout=stage.layout,
                                       digests=digests, compress=True)
                with _progress(progress, f"staging {plan.field}", built.zip_bytes) as adv:
                    stage.upload(uri, built.path, on_progress=adv, **_hashed(stage, built))
                return _staged_uri(stage, uri), built.zip_bytes, True, True, stage.label
            return _staged_uri(stage, uri), built.zip_bytes, False, True, stage.label
        with _progress(progress, f"uploading {plan.field}", built.zip_bytes) as adv:
            target.upload(uri, built.path, on_progress=adv, **_hashed(target, built))
        return target.published_uri(uri), built.zip_bytes, True, False, target.label
    finally:
        built.path.unlink(missing_ok=True)


def _hashed(target: Target, built: Any) -> dict[str, Any]:
    """For a target that verifies a package against its name: what Ray hashed that the zip
    cannot show (packaging's `BuiltPackage.hashed_dirs`)."""
    return {"hashed_dirs": built.hashed_dirs} if target.verifies_packages else {}


def _staged_uri(stage: Target, uri: str) -> str:
    """The URI Ray's nodes fetch a staged package from (an agent's download URL, a file:// zip)."""
    return stage.remote_uri(uri) if isinstance(stage, RemoteServing) else stage.published_uri(uri)


def _set(d: dict[str, Any], json_path: tuple[Any, ...], value: Any) -> None:
    cur: Any = d
    for k in json_path[:-1]:
        cur = cur[k]
    cur[json_path[-1]] = value


def push(path: Path | str | None, *, target: Target | None, dry_run: bool = False,
         stage_to: Target | None = None, env: Mapping[str, str] | None = None,
         progress: Progress | None = None, cwd: Path | None = None,
         base_dir: Path | None = None, outputs: Sequence[Path] = (),
         sizes: bool | None = None, rtenv_envs: bool = False, trees: str = "auto"
         ) -> PushResult:
    """Validate, package and publish; see the module docstring. `base_dir`: what relative
    paths resolve against (default: `cwd`, the current directory); `outputs`: files this push
    writes, never packaged (see package_runtime_env); `sizes`: fill each package's size tree
    (default: only for a dry run, whose report shows it); `rtenv_envs`: move `pip`/`uv` into
    the `rtenv` field first (rtenv's Ray plugin builds it: rayplugin/convert.py); `trees`: see
    `publish`."""
    env = dict(os.environ if env is None else env)
    data, base, label = load_input(path, cwd, base_dir)
    if rtenv_envs:
        from rtenv_cli.core.rayplugin.convert import to_rtenv

        data = to_rtenv(data, base)
    # A directory argument means {"working_dir": <it>}: nothing the validator could find (the
    # packaging checks are push's own) and no file to inline, so their imports and runs are
    # skipped.
    generated = path is not None and Path(path).is_dir()
    notes = [] if generated else validate(data, base, label, env)
    inlined: list[tuple[tuple[str, ...], str]] = []
    if not generated:
        from rtenv_cli.core.rayplugin.convert import inline_files

        data, inlined = inline_files(data, base)
    notes += [f"{'.'.join(p)}: inlined {name}, so the pushed runtime_env works from any "
              "directory" for p, name in inlined]
    result = publish(data, base, target=target, dry_run=dry_run, stage_to=stage_to, env=env,
                     progress=progress, outputs=outputs,
                     sizes=dry_run if sizes is None else sizes, trees=trees)
    return replace(result, notes=(*notes, *result.notes))


def publish(data: Mapping[str, Any], base_dir: Path, *, target: Target | None,
            dry_run: bool = False, stage_to: Target | None = None,
            env: Mapping[str, str] | None = None, progress: Progress | None = None,
            outputs: Sequence[Path] = (), sizes: bool = False, trees: str = "auto"
            ) -> PushResult:
    """Package and publish the local sources of an already validated runtime_env `data`.
    `trees`: auto (the tree path where every node of a Ray cluster loads rtenv's plugin), tree
    (that or an error), zip (Ray's gcs:// zips)."""
    from rtenv_cli.core.packaging.walk import memoized_scans

    with memoized_scans(), _gc_paused():
        return _publish_all(data, base_dir, target=target, dry_run=dry_run, stage_to=stage_to,
                            env=dict(os.environ if env is None else env), progress=progress,
                            outputs=outputs, sizes=sizes, trees=trees)


def _publish_all(data: Mapping[str, Any], base_dir: Path, *, target: Target | None,
                 dry_run: bool, stage_to: Target | None, env: dict[str, str],
                 progress: Progress | None, outputs: Sequence[Path], sizes: bool,
                 trees: str = "auto") -> PushResult:
    notes = []
    plans = package_runtime_env(data, base_dir, outputs)
    for plan in plans:
        require_source(plan)
    if not plans:
        notes.append("no local working_dir or py_modules: nothing to package")
    scanned = [(p, *_scan(p, env, progress)) for p in plans]
    _check_collisions([(p, uri) for p, _s, uri, _d in scanned])
    out = copy.deepcopy(dict(data))
    outcomes: list[PackageOutcome] = []
    kv, why, guarded = (None, None, False) if dry_run or target is None or not plans else \
        tree_path(target, trees)
    if why:
        notes.append(why)
    moved: dict[str, Any] = {}
    for plan, scan, uri, digests in scanned:
        if kv is not None and scan is not None:
            from rtenv_cli.core.trees.publish import publish_scan

            with _progress(progress, f"publishing {plan.field}", scan.total_bytes) as adv:
                sent = publish_scan(kv, scan, digests, plan.kind, on_progress=adv)
            if plan.kind == "working_dir":
                moved["working_dir"] = sent.uri
            else:
                moved.setdefault("py_modules", []).append(sent.uri)
            _set(out, plan.json_path, None)  # dropped below
            outcomes.append(PackageOutcome(plan.field, str(plan.source), sent.uri, uri,
                                           sent.file_count, sent.total_bytes, None,
                                           sent.bytes_sent > 0, kv.target.label,
                                           tree=sent.to_dict()))
            continue
        from rtenv_cli.core.packaging.sizes import size_tree

        tree = tuple(size_tree(scan)) if scan is not None and sizes else ()
        py_dirs: tuple[tuple[str, str], ...] = ()
        warns: tuple[str, ...] = ()
        count = scan.file_count if scan is not None else 1
        total = scan.total_bytes if scan is not None else plan.source.stat().st_size
        if scan is not None:
            rules = dict(scan.ignored_top)
            py_dirs = tuple((d, rules.get(d, "")) for d in scan.ignored_py_dirs)
            warns = scan.warnings
        if dry_run or target is None:
            warns = (*warns, *(_over_dashboard(total) if dry_run else ()))
            _set(out, plan.json_path, uri)
            outcomes.append(PackageOutcome(plan.field, str(plan.source), uri, uri, count, total,
                                           size_tree=tree, ignored_py_dirs=py_dirs,
                                           warnings=warns))
            continue
        published, zip_bytes, uploaded, staged, where = _publish(plan, scan, uri, target,
                                                                 stage_to, env, progress,
                                                                 digests)
        _set(out, plan.json_path, published)
        outcomes.append(PackageOutcome(plan.field, str(plan.source), published, uri, count,
                                       total, zip_bytes, uploaded, where, staged, tree, py_dirs,
                                       warns))
    if kv is not None and kv.target is not target:
        kv.close()  # a dashboard's GCS, opened for the tree path
    if plans:
        out.pop("excludes", None)  # applied here; Ray ignores it for URIs
    if moved:
        move_to_rtenv(out, moved, guarded)
    pins = target is not None and target.pins and not dry_run and plans and not moved
    return PushResult(tuple(outcomes), out, target.label if target is not None else "(dry run)",
                      dry_run, PIN_SECONDS if pins else None, tuple(notes),
                      path="tree" if moved else "zip" if _is_ray_cluster(target) else None)


def _is_ray_cluster(target: Target | None) -> bool:
    """Whether `target` is a Ray cluster (its GCS or dashboard), where a push takes a path: the
    agent and a shared directory take neither (their packages are no Ray's)."""
    from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
    from rtenv_cli.core.transport.ray_gcs import RayGcsTarget

    return isinstance(target, (RayGcsTarget, RayDashboardTarget))


def tree_path(target: Target, mode: str) -> tuple[Any, str | None, bool]:
    """(the cluster's KV when this push takes the tree path, else None; the one line saying
    why not, when the user may have expected it; whether every node's plugin removes the
    guard). `mode`: auto | tree | zip (`--via`). One decision for `push` and `push --watch`."""
    from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
    from rtenv_cli.core.transport.ray_gcs import RayGcsTarget

    if mode == "zip":
        return None, None, False
    from rtenv_cli.core.transport.ray_kv import NoGcsRoute, RayKV
    from rtenv_cli.core.trees.cluster import settled

    if isinstance(target, RayDashboardTarget):
        # the KV through the GCS the dashboard names: its own API cannot read it (ray_kv.py)
        try:
            kv = RayKV.through_dashboard(target.url, target.env, target.token)
        except NoGcsRoute as exc:
            why = f"zip path: the tree path needs the cluster's GCS: {exc.message}"
            if mode == "tree":
                raise ConfigError(why.removeprefix("zip path: "),
                                  hint=exc.hint or "pass the head's GCS address") from None
            return None, why, False
    elif isinstance(target, RayGcsTarget):
        kv = RayKV(target)
    else:
        if mode == "tree":
            raise ConfigError(f"{target.label} is not a Ray cluster; the tree path (content-"
                              "addressed files through rtenv's plugin) needs one",
                              hint="pass the head's GCS address or dashboard URL, or --via auto")
        return None, None, False
    ready = settled(kv)
    if ready.ok:
        return kv, None, ready.guarded
    if kv.target is not target:
        kv.close()
    if mode == "tree":
        raise ConfigError(f"--via tree: {ready.why_not()}",
                          hint="load the plugin on every node, or push with --via auto")
    return None, f"zip path: {ready.why_not()}", False


def move_to_rtenv(out: dict[str, Any], moved: Mapping[str, Any], guarded: bool) -> None:
    """Published trees go into the `rtenv` field, out of Ray's working_dir/py_modules; with
    `guarded`, beside the guard that fails a node without rtenv's plugin (guard.GUARD_FIELD)."""
    from rtenv_cli.core.rayplugin.guard import GUARD_FIELD, GUARD_MESSAGE
    from rtenv_cli.core.spec.model import RTENV_FIELD as FIELD

    field_ = dict(out.get(FIELD) or {})
    if "working_dir" in moved:
        out.pop("working_dir", None)
        field_["working_dir"] = moved["working_dir"]
    if "py_modules" in moved:
        rest = [m for m in out.get("py_modules") or [] if m is not None]
        if rest:
            out["py_modules"] = rest
        else:
            out.pop("py_modules", None)
        field_["py_modules"] = [*field_.get("py_modules", []), *moved["py_modules"]]
    out[FIELD] = field_
    if guarded and not out.get(GUARD_FIELD):
        out[GUARD_FIELD] = GUARD_MESSAGE


def _over_dashboard(total: int) -> tuple[str, ...]:
    """A dry run's word on a package past the dashboard's upload limit, which a real push to
    it refuses (by the size before compression: a dry run contacts no target)."""
    from rtenv_cli.core.transport.base import RAY_HTTP_LIMIT
    from rtenv_cli.core.units import human_bytes

    if total <= RAY_HTTP_LIMIT:
        return ()
    return (f"{human_bytes(total)} before compression: over the {RAY_HTTP_LIMIT // 2**20} MiB "
            "upload limit of a Ray dashboard (`ray job submit`, --address http://<head>:8265) "
            "unless it compresses below it; the cluster's GCS takes up to 512 MiB (--address "
            "<head>:6379), or publish it with --stage-to",)


def dump_runtime_env(runtime_env: Mapping[str, Any], path: Path | None = None) -> str:
    """A runtime_env as text: JSON when `path` ends in .json, else YAML."""
    if path is not None and path.suffix == ".json":
        import json

        return json.dumps(dict(runtime_env), indent=2) + "\n"
    import yaml

    text: str = yaml.safe_dump(dict(runtime_env), sort_keys=False, allow_unicode=True)
    return text


def write_runtime_env(path: Path, runtime_env: Mapping[str, Any], text: str | None = None
                      ) -> None:
    """Write a pushed runtime_env (or `text`, a pushed Serve config or manifest) to `path`
    (`push -o`), atomically: a reader (or `ray job submit`) never sees half a file, even while
    --watch rewrites it."""
    from rtenv_cli.core.fsutil import atomic_write_text

    atomic_write_text(path, dump_runtime_env(runtime_env, path) if text is None else text)

"""Ray's client-side packaging step (`upload_working_dir_if_needed`, `upload_py_modules_if_needed`
and the job SDK's upload callbacks): types, URIs, local paths and excludes, in Ray's order; local
paths are replaced by Ray's `gcs://` URIs."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from rtenv_cli.core.spec import model
from rtenv_cli.core.spec import normalize as n

if TYPE_CHECKING:
    from rtenv_cli.core.packaging.packscan import Walked
    from rtenv_cli.core.spec.construct import RaySemantics
    from rtenv_cli.core.spec.pipeline_result import PipelineResult

PLACEHOLDER_URI = model.PLACEHOLDER_URI


class PackageMemo(Protocol):
    """What a validate run remembers of its local packages, shared by its files (lint's
    `FileCache`): the forgiving walks and the URIs computed from them."""

    @property
    def walks(self) -> dict[tuple[Any, ...], Walked]: ...

    @property
    def uris(self) -> dict[tuple[Any, ...], str]: ...


def _resolve(p: str, base_dir: Path) -> Path:
    return Path(p) if Path(p).is_absolute() else base_dir / p


class Packager:
    """Replaces local working_dir/py_modules with `gcs://` URIs the way Ray's helpers do."""

    def __init__(self, ray: RaySemantics, prefix: tuple[Any, ...], result: PipelineResult, *,
                 cache: PackageMemo | None = None) -> None:
        self.base_dir, self.api, self.env = ray.base_dir, ray.api, ray.env
        self.prefix, self.result = prefix, result
        self.walks = cache.walks if cache is not None else None
        self.uris = cache.uris if cache is not None else None

    def fail(self, message: str, path: tuple[Any, ...], kind: str = "ValueError",
             hint: str | None = None) -> None:
        self.result.errors.append(n.RuntimeEnvValueError(
            message, (*self.prefix, *path), python_type=kind, stage="packaging", hint=hint))

    def uri_for(self, source: Path, kind: str, excludes: list[str], json_path: tuple[Any, ...]
                ) -> str | None:
        """Ray's URI for a local package; None when Ray fails on it (the error is recorded)."""
        from rtenv_cli.core.errors import RtenvError
        from rtenv_cli.core.packaging import packscan
        from rtenv_cli.core.packaging.hashing import digest_entries, package_uri, scan_uri
        from rtenv_cli.core.packaging.walk import scan_package

        self.result.packages.append(((*self.prefix, *json_path), source, kind))
        limit = (model.JOB_SUBMIT_UPLOAD_LIMIT if self.api == "job-submit"
                 else model.GCS_PACKAGE_LIMIT)
        try:
            if not source.is_dir():
                return package_uri(source, kind=kind, excludes=tuple(excludes),  # type: ignore[arg-type]
                                   env=dict(self.env))
            scan = scan_package(source, kind=kind, excludes=tuple(excludes),  # type: ignore[arg-type]
                                env=dict(self.env))
            if scan.total_bytes >= limit:
                self.too_large(json_path, scan.total_bytes,
                               [(e.relpath, e.size) for e in scan.files()])
                return self._unhashed(source, f"is over Ray's {limit >> 20} MiB limit")
            uris = {} if self.uris is None else self.uris  # shared by the run's files
            key = packscan.package_key(source, kind, excludes, self.env)
            if key not in uris:
                uris[key] = scan_uri(scan, digest_entries(scan.entries))
            return uris[key]
        except RtenvError as exc:  # what Ray would hang on or ship oddly (FIFO, loop, ...)
            problem = exc
        try:
            if not source.is_dir():
                uri = packscan.file_uri(source)
            else:
                walked = packscan.cached_walk(source, kind, excludes, self.env, self.walks)
                if not walked.truncated and walked.total_bytes >= limit:
                    self.too_large(json_path, walked.total_bytes, list(walked.files))
                if walked.truncated or walked.total_bytes >= limit:
                    return self._unhashed(source, (
                        f"has more than {packscan.WALK_LIMIT} paths" if walked.truncated
                        else f"is over Ray's {limit >> 20} MiB limit"))
                uri = packscan.directory_uri(walked)
        except UnicodeEncodeError:  # Ray hashes names as UTF-8 and fails the same way
            self.fail(problem.message, json_path, "UnicodeEncodeError", hint=problem.hint)
            return None
        self.result.notes.append(f"{source}: {problem.message}; URI computed without it")
        return uri

    def too_large(self, path: tuple[Any, ...], total: int, files: list[tuple[str, int]]
                  ) -> None:
        """Ray's upload of this package fails: the dashboard refuses request bodies over
        100 MiB (`ray job submit`), the GCS packages of 512 MiB and more (`ray.init`). Ray
        zips without compression, so the files' total is the upload's size."""
        from rtenv_cli.core.packaging.sizes import offenders_of

        mib = total / 1024 / 1024
        top = offenders_of(files, 3)
        largest = ", ".join(f"{name} {size / 1024 / 1024:.1f} MiB" for name, size in top
                            if size >= top[0][1] // 100)
        if self.api == "job-submit":
            message = (f"the package is {mib:.1f} MiB, over the dashboard's 100 MiB upload "
                       "limit: `ray job submit` fails with HTTP 413 Request Entity Too Large "
                       f"(Ray reports 'Request failed with status code 500'); largest: {largest}")
            kind = "RuntimeError"
            hint = ("upload it without the dashboard: `rtenv push FILE --address <head>:6379` "
                    "writes it straight to the GCS (up to 512 MiB), `--stage-to file:///shared"
                    "/dir` (or an rtenv agent) has no limit; or exclude the largest entries")
        else:
            message = (f"Package size ({mib:.2f}MiB) exceeds the maximum size of 512.00MiB; "
                       f"largest: {largest}")
            kind = "RuntimeEnvSetupError"
            hint = ("exclude the largest entries (excludes, .rayignore), or publish it with "
                    "`rtenv push FILE --stage-to file:///shared/dir` (no size limit)")
        self.result.errors.append(n.RuntimeEnvValueError(
            message, (*self.prefix, *path), python_type=kind, stage="upload", hint=hint))

    def _unhashed(self, source: Path, why: str) -> str:
        # hashing would read every byte of a package Ray cannot upload anyway
        self.result.notes.append(f"{source} {why}: its gcs:// URI is not computed and is "
                                 "omitted from `normalized`")
        return PLACEHOLDER_URI

    def working_dir(self, rt: dict[str, Any]) -> bool:
        try:
            return self._working_dir(rt)
        except OSError as exc:  # a path over the system's limits: Ray's own stat fails alike
            self.fail(f"[Errno {exc.errno}] {exc.strerror}", ("working_dir",), "OSError",
                      hint="shorten the path")
            return False

    def py_modules(self, rt: dict[str, Any]) -> bool:
        try:
            return self._py_modules(rt)
        except OSError as exc:
            self.fail(f"[Errno {exc.errno}] {exc.strerror}", ("py_modules",), "OSError",
                      hint="shorten the path")
            return False

    def _uri_checked(self, value: str, field_name: str, path: tuple[Any, ...]) -> bool | None:
        """True: a URI (passed through); None: an error was recorded; False: a local path."""
        try:
            if n.local_dir_uri_path(value) is not None:
                return True
        except ValueError as exc:
            self.fail(str(exc), path)
            return None
        try:
            protocol, name = n.parse_uri(value)
        except ValueError:
            return False
        if protocol == "gcs" or protocol in model.REMOTE_PROTOCOLS:
            try:
                n.check_extension(name, field_name, value.split("?", 1)[0])
            except ValueError as exc:
                self.fail(str(exc), path)
                return None
        return True

    def _working_dir(self, rt: dict[str, Any]) -> bool:  # noqa: PLR0911 - Ray's stages, in order
        wd = rt.get("working_dir")
        if wd is None:
            return True
        path = ("working_dir",)
        if not isinstance(wd, str):
            self.fail("working_dir must be a string or Path (either a local path or remote URI), "
                      f"got {type(wd)}.", path, "TypeError")
            return False
        is_uri = self._uri_checked(wd, "working_dir", path)
        if is_uri is None:
            return False
        if is_uri:
            return True
        user = rt.get("excludes") or []
        try:
            user_list = list(user)
        except TypeError as exc:
            self.fail(str(exc), ("excludes",), "TypeError")
            return False
        source = _resolve(wd, self.base_dir)
        if source.is_dir():
            problem = pathspec_problem(user_list)
            if problem:
                self.fail(problem, ("excludes",), "TypeError",
                          hint="write excludes as a list of strings")
                return False
            uri = self.uri_for(source, "working_dir", [p for p in user_list if p], path)
            if uri is None:
                return False
            rt["working_dir"] = uri
            return True
        ext = n.package_extension(source.name, model.WORKING_DIR_EXTENSIONS)
        if not source.exists() or ext is None:
            self.fail(f"directory {Path(wd)} must be an existing directory or a supported archive "
                      f"({', '.join(model.WORKING_DIR_EXTENSIONS)})", path,
                      hint=f"relative paths resolve against {self.base_dir}, not the file")
            return False
        import hashlib

        digest = hashlib.sha1(source.read_bytes()).hexdigest()  # noqa: S324 - Ray's package name
        ext = ".tar.gz" if ext in (".tgz", ".tar.gz") else ext
        rt["working_dir"] = f"gcs://_ray_pkg_{digest}{ext}"
        return True

    def _py_modules(self, rt: dict[str, Any]) -> bool:
        mods = rt.get("py_modules")
        if mods is None:
            return True
        if not isinstance(mods, list):
            self.fail("py_modules must be a List of local paths, imported modules, or URIs, got "
                      f"{type(mods)}.", ("py_modules",), "TypeError")
            return False
        uris: list[Any] = []
        for index, mod in enumerate(mods):
            path = ("py_modules", index)
            if not isinstance(mod, str):
                self.fail("py_modules must be a list of file paths, URIs, or imported modules, "
                          f"got {type(mod)}.", path, "TypeError")
                return False
            uri = self._module(rt, mod, path)
            if uri is None:
                return False
            uris.append(uri)
        rt["py_modules"] = uris
        return True

    def _module(  # noqa: PLR0911 - one return per Ray branch
        self, rt: dict[str, Any], mod: str, path: tuple[Any, ...],
    ) -> str | None:
        is_uri = self._uri_checked(mod, "py_modules", path)
        if is_uri is None:
            return None
        if is_uri:
            return mod
        source = _resolve(mod, self.base_dir)
        if source.is_dir() or Path(mod).suffix == ".py":
            if source.is_dir():
                excludes = rt.get("excludes")
                patterns = [] if excludes is None else excludes
                problem = pathspec_problem(patterns)
                if problem:
                    self.fail(problem, ("excludes",), "TypeError",
                              hint="write excludes as a list of strings")
                    return None
                return self.uri_for(source, "py_module", [p for p in patterns if p], path)
            patterns = []
            absolute = source.absolute()
            if not source.is_file():
                self.fail(f"File {absolute} must be an existing file", path)
                return None
            if self.api == "job-submit":
                # Ray bug: the job SDK's upload callback always packages a directory
                self.fail(f"directory {absolute} must be an existing directory", path,
                          hint="`ray job submit` cannot upload a single .py module: put it in a "
                          "directory and list the directory, or use ray.init(runtime_env=...)")
                return None
            return self.uri_for(source, "py_module", patterns, path)
        if Path(mod).suffix == ".whl":
            if not source.is_file():
                if self.api == "job-submit":
                    self.fail(f"[Errno 2] No such file or directory: '{mod}'", path,
                              "FileNotFoundError")
                else:
                    self.fail(f"Failed to upload {mod} to the Ray cluster: [Errno 2] No such "
                              f"file or directory: '{mod}'", path, "RuntimeEnvSetupError")
                return None
            return f"gcs://{Path(mod).name}"
        self.fail(f"py_modules entry must be a .py file, a directory, or a .whl file; got {mod}",
                  path)
        return None


def pathspec_problem(lines: Any) -> str | None:
    """What Ray's vendored pathspec (`PathSpec.from_lines`) raises for these patterns, if any:
    strings and non-iterables are refused, falsy items skipped, other non-strings refused."""
    if isinstance(lines, (str, bytes)) or not isinstance(lines, Iterable):
        return f"lines:{lines!r} is not an iterable."
    for line in lines:
        if line and not isinstance(line, str):
            return f"pattern:{line!r} is not a string, RegexObject, or None."
    return None

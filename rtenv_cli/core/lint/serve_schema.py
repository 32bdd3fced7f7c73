"""Serve configs checked with Ray Serve's own schema (`ray.serve.schema.ServeDeploySchema`, what
`serve deploy`, `serve run` and KubeRay's RayService submit to), imported only when a file holds a
Serve config: RTE180 (the schema refuses the config) and RTE181 (a local working_dir/py_modules,
which Serve refuses: it needs remote URIs).

Importing `ray.serve` needs Serve's extras (fastapi, ...) that the schema itself does not use;
without them the schema module is imported on its own (see `_import_schema`). Without Ray at all
RTE181 still comes from rtenv's copy of Serve's URI rule (`uri_problems`) and RTE180 from rtenv's
table of Serve's structure (serve_structure.py); the file's notes say which of the two ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rtenv_cli.core.lint.context import diag_at
from rtenv_cli.core.lint.diagnostic import Diagnostic
from rtenv_cli.core.spec import normalize as n
from rtenv_cli.core.spec.forms import ServeConfig, Site
from rtenv_cli.core.spec.loader import Positions

SERVE_SCHEMA = "serve-schema"  # FileReport.serve_check: Ray Serve's own schema ran
SERVE_TABLE = "rtenv-table"  # rtenv's table of Serve's structure stood in for it
LOCAL_URI_TEXT = "support only remote URIs"  # in Serve's error for a local path
_LOCAL_HINT = ("Serve deploys from the cluster: zip the directory to remote storage (s3://, "
               "gs://, https://... .zip), or `rtenv push` it and use the gcs:// URI it prints; "
               "`local:///path` names a directory already on every node")


def uri_problems(site: Site) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Serve's `runtime_env_contains_remote_uris`, in rtenv's words: (path, Ray's error) of each
    working_dir/py_modules entry that is not a URI Serve accepts."""
    data = site.data
    if not isinstance(data, dict):
        return
    mods = data.get("py_modules", [])
    entries = list(enumerate(mods)) if isinstance(mods, list) else []
    located = [((*site.prefix, "py_modules", i), uri) for i, uri in entries]
    if "working_dir" in data:
        located.append(((*site.prefix, "working_dir"), data["working_dir"]))
    for path, uri in located:
        if not isinstance(uri, str):
            continue  # Ray's own checks report the type
        try:
            n.parse_uri(uri)
        except ValueError as exc:
            yield path, str(exc)


def import_schema() -> Any:
    """`ray.serve.schema`, or the exception that stops it (Serve's own deprecation warnings
    about pydantic are silenced: they are not the user's)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _import_schema()


def _import_schema() -> Any:
    """`ray.serve`'s package __init__ imports the whole Serve API (fastapi, starlette); the
    schema only needs pydantic and a few Serve modules, so when the package does not import,
    its modules are imported without running the __init__ (a stand-in package object, removed
    again at once)."""
    import importlib
    import sys
    import types

    try:
        return importlib.import_module("ray.serve.schema")
    except ImportError as exc:
        first: Exception = exc
    if sys.modules.get("ray.serve") is not None:  # a real, broken Serve package
        return first
    try:
        import ray
    except ImportError:
        return first
    stand_in = types.ModuleType("ray.serve")
    stand_in.__path__ = [f"{ray.__path__[0]}/serve"]
    sys.modules["ray.serve"] = stand_in
    try:
        return importlib.import_module("ray.serve.schema")
    except Exception:  # the schema itself does not import: report the first reason
        return first
    finally:
        if sys.modules.get("ray.serve") is stand_in:
            del sys.modules["ray.serve"]


def check(configs: list[ServeConfig], sites: list[Site], positions: Positions
          ) -> tuple[list[Diagnostic], str, str | None]:
    """Serve's verdict on each Serve config of the file, positioned in the file; which check
    decided it (SERVE_SCHEMA: Serve's own; SERVE_TABLE: rtenv's table of Serve's structure,
    serve_structure.py, when the schema cannot be imported, or for Anyscale's specs); and a note
    for the file when the table stood in for Serve's schema. The table's key and runtime_env
    checks run either way: Serve's schema ignores unknown keys without a word."""
    from rtenv_cli.core.lint import serve_structure

    checked = [c for c in configs if c.origin != "anyscale"]  # Anyscale uploads local dirs
    schema = import_schema() if checked else None
    missing = isinstance(schema, Exception)
    out: list[Diagnostic] = []
    for config in configs:
        out.extend(serve_structure.check(config, positions,
                                         shapes=missing and config in checked))
        if config.old_format:
            out.extend(serve_structure.old_format(config, positions))
    for config in checked:
        serve_sites = [s for s in sites if s.serve == config.prefix]
        local = {path: message for s in serve_sites for path, message in uri_problems(s)}
        if missing:
            out.extend(_local_findings(local, positions))
            continue
        out.extend(_schema_findings(schema, config, local, positions))
    if missing:
        return out, SERVE_TABLE, (
            "Serve config checked with rtenv's table of Serve's structure: Ray Serve's schema is "
            f"not importable here ({type(schema).__name__}: {schema}); install ray[serve], the "
            "cluster's version, for Serve's own check")
    return out, (SERVE_SCHEMA if checked else SERVE_TABLE), None


def _local_findings(local: dict[tuple[Any, ...], str], positions: Positions
                    ) -> Iterator[Diagnostic]:
    for path, message in local.items():
        yield diag_at(positions, "RTE181", "Serve refuses a local path here: runtime_envs in "
                      "a Serve config support only remote URIs in working_dir and py_modules "
                      f"({message})", path, hint=_LOCAL_HINT, ray_error=True, prefer="value")


def _schema_findings(schema: Any, config: ServeConfig, local: dict[tuple[Any, ...], str],
                     positions: Positions) -> list[Diagnostic]:
    from pydantic import ValidationError

    model = schema.ServeApplicationSchema if config.single_app else schema.ServeDeploySchema
    try:
        model.model_validate(config.data)
    except ValidationError as exc:
        errors = exc.errors()
    except Exception as exc:  # a validator that raises outside pydantic (odd value types)
        return [diag_at(positions, "RTE180", f"Ray Serve's schema fails on this config: "
                        f"{type(exc).__name__}: {exc}", config.prefix, ray_error=True,
                        hint="fix the value types of the Serve config")]
    else:
        return []
    out: list[Diagnostic] = []
    for error in errors:
        path = (*config.prefix, *error.get("loc", ()))
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if LOCAL_URI_TEXT in message:
            inside = [p for p in local if p[:len(path)] == path]
            out.extend(_local_findings({p: local[p] for p in inside}, positions) if inside else
                       [diag_at(positions, "RTE181", message, path, hint=_LOCAL_HINT,
                                ray_error=True)])
            continue
        if error.get("type") == "missing":  # it lands on the parent: the key is not there
            message = f"`{'.'.join(map(str, path))}`: {message}"
        out.append(diag_at(positions, "RTE180", f"Ray Serve's schema refuses this: {message}",
                           path, ray_error=True,
                           hint="`serve deploy` (and KubeRay) reject the whole config; see "
                           "https://docs.ray.io/en/latest/serve/production-guide/config.html"))
    return out

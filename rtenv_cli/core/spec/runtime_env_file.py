"""The one reader of a runtime_env file for push, watch, run and explain: a bare runtime_env,
a job spec, a Serve config's application (locate.py's shapes) or a KubeRay manifest's
runtime_env (forms.py's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import ConfigError, UsageError
from rtenv_cli.core.spec.loader import LoadedDoc, load_path
from rtenv_cli.core.spec.locate import DocKind, document_kind, find_runtime_envs, serve_app


@dataclass(frozen=True)
class RuntimeEnvFile:
    """A runtime_env read from a file, with where it sits in that file."""

    path: str
    runtime_env: dict[str, Any]
    prefix: tuple[Any, ...]  # the runtime_env's JSON path in `doc` (positions)
    doc: LoadedDoc
    kind: DocKind


def load_runtime_env_file(path: Path | str, *, app: str | None = None) -> RuntimeEnvFile:
    """The one way rtenv reads a runtime_env file (push, watch, run, explain).

    A KubeRay manifest (a RayJob's `runtimeEnvYAML`, a RayService's applications, also among
    other `---` documents) gives its one runtime_env, found as `rtenv validate` finds it
    (forms.py); one with several is a UsageError naming them.

    Parsed like `ray job submit --runtime-env FILE` (YAML 1.1 for .json files too, see
    loader.py); a job spec's `runtime_env:` and a Serve config's application (`app`, or the only
    one) are unwrapped by `document_kind`'s rules, the ones `rtenv validate` applies. An empty
    or null runtime_env is `{}` (Ray's "no runtime_env"). Raises UsageError for a file that
    cannot be read or an ambiguous Serve config, ConfigError for one that is not a runtime_env.
    """
    name = str(path)
    if not Path(path).exists():  # other non-files (devices, FIFOs) are the loader's to refuse
        raise UsageError(f"{name}: no such file", path=name,
                         hint="pass a runtime_env YAML/JSON file (a bare runtime_env or a job "
                         "spec)")
    doc = load_path(path)
    carried = _manifest(name, doc)
    if carried is not None:
        if app is not None:
            raise UsageError(f"--app {app}: {name} is a KubeRay manifest", path=name,
                             hint="drop --app; a manifest's runtime_env is read from its "
                             "one runtimeEnvYAML or serveConfigV2 application")
        return carried
    if doc.error is not None:
        span = doc.error.span
        where = f":{span.line}:{span.column}" if span else ""
        cls = UsageError if doc.error.kind == "OSError" else ConfigError
        raise cls(f"{name}{where}: cannot parse: {doc.error.kind}: {doc.error.message}",
                  path=name, hint="fix the YAML/JSON syntax; `rtenv validate` shows where")
    kind = document_kind(doc)
    if kind == "serve":
        prefix, data = serve_app(name, doc.data["applications"], app)  # type: ignore[index]
    elif app is not None:
        raise UsageError(f"--app {app}: {name} is not a Serve config (no `applications:`)",
                         path=name, hint="drop --app for a runtime_env or job file")
    else:
        found = find_runtime_envs(doc)
        prefix, data = found[0] if found else (("runtime_env",), None)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        where = ".".join(str(p) for p in prefix)
        raise ConfigError(f"{name}{': ' + where if where else ''}: a runtime_env must be a "
                          f"mapping, not {type(data).__name__}", path=name,
                          hint="write keys like working_dir:, env_vars:")
    return RuntimeEnvFile(name, data, prefix, doc, kind)




def _manifest(name: str, doc: LoadedDoc) -> RuntimeEnvFile | None:
    """The runtime_env of a KubeRay manifest, or None when `doc` is no such manifest."""
    from rtenv_cli.core.spec.forms import read

    if doc.error is not None and doc.error.kind != "ComposerError":
        return None
    form = read(doc)
    if form is None or form.kind != "kuberay":
        return None
    if form.errors:
        where, error = form.errors[0]
        raise ConfigError(f"{name}: {'.'.join(map(str, where))}: cannot parse: "
                          f"{error.message}", path=name,
                          hint=f"run `rtenv validate {name}` for where")
    sites = [s for s in form.sites if s.data is not None]
    if len(sites) > 1:
        listed = ", ".join(".".join(map(str, s.prefix)) for s in sites)
        raise UsageError(f"{name} holds {len(sites)} runtime_envs ({listed})", path=name,
                         hint=f"`rtenv push {name} -o FILE` publishes them all; for one, "
                         "write it to a file of its own")
    if not sites:
        return RuntimeEnvFile(name, {}, (), form.doc, "runtime_env")
    [site] = sites
    if not isinstance(site.data, dict):
        raise ConfigError(f"{name}: {'.'.join(map(str, site.prefix))}: a runtime_env must be "
                          f"a mapping, not {type(site.data).__name__}", path=name,
                          hint="write keys like working_dir:, env_vars:")
    return RuntimeEnvFile(name, site.data, site.prefix, form.doc, "runtime_env")

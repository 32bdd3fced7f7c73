"""Every file form that carries a runtime_env, and where each runtime_env sits in it.

- a bare runtime_env (`ray job submit --runtime-env FILE`, `ray.init(runtime_env=...)`);
- a file holding only `runtime_env:` ("wrapped"): under `--runtime-env` Ray reads that key as one
  unknown plugin field and applies nothing in it;
- a job spec: `entrypoint:` beside `runtime_env:`;
- a Ray Serve config (`serve deploy`): `applications[i].runtime_env` and each deployment's
  `ray_actor_options.runtime_env`; also the single-application format of old `serve build`
  (`import_path` at the top), which Serve 2.60 refuses (`ServeConfig.old_format`);
- a KubeRay manifest (RayJob, RayService, RayCluster, RayCronJob; one or several `---`
  documents): `spec.runtimeEnvYAML` (a YAML string; a RayCronJob's under `spec.jobTemplate`),
  `spec.serveConfigV2` (a Serve config as a YAML string) and the older base64 `spec.runtimeEnv`
  (ray.io/v1alpha1), with positions in file lines (see embedded.py); a `spec.runtimeEnv` written
  as a mapping is a `Problem`: KubeRay's CRD has no such field;
- an Anyscale job or service spec: `runtime_env` (with Anyscale's `upload_path`),
  `ray_serve_config` (a Serve config, or one application), or the newer top-level
  `working_dir`/`env_vars`/`excludes`/`py_modules` fields; a service is told by its keys
  (`applications` beside `name`/`image_uri`/Anyscale's own fields), not by `compute_config`.

`read(doc)` returns the `Form`: the kind, every runtime_env (`Site`) with its JSON path, the Serve
configs (for Serve's own schema) and the embedded documents that do not parse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rtenv_cli.core.spec.loader import LoadedDoc, ParseError, load_documents
from rtenv_cli.core.spec.locate import document_kind
from rtenv_cli.core.spec.model import ALL_TOP_LEVEL_KEYS

JsonPath = tuple[Any, ...]
# how a runtime_env reaches Ray: the file itself, a job spec, Serve, KubeRay or Anyscale
Origin = Literal["runtime_env", "wrapped", "job", "serve", "kuberay", "anyscale"]

# Form.kind: every file form this module recognises (FileReport.kind; the README lists them)
KINDS = ("runtime_env", "job", "wrapped", "serve", "kuberay", "anyscale-job",
         "anyscale-service")
KUBERAY_KINDS = ("RayJob", "RayService", "RayCluster", "RayCronJob")
# top-level keys only Anyscale's job and service specs have
ANYSCALE_KEYS = frozenset({
    "compute_config", "compute_config_id", "cluster_env", "build_id", "project_id", "project",
    "cloud", "ray_serve_config", "containerfile", "requirements", "job_queue_config",
    "max_retries", "timeout_s", "registry_login_secret", "ray_gcs_external_storage_config",
    "rollout_strategy", "canary_percent", "query_auth_token_enabled", "upload_path",
})
# Anyscale's newer specs spell these runtime_env fields at the top level
ANYSCALE_RUNTIME_ENV_KEYS = ("working_dir", "excludes", "env_vars", "py_modules",
                             "py_executable")
UPLOAD_PATH = "upload_path"  # Anyscale uploads a local working_dir there; Ray never sees it
# keys of an Anyscale service spec beside `applications` that no Serve config has
ANYSCALE_SERVICE_KEYS = frozenset({"name", "image_uri", "version", "description", "env_vars",
                                   "working_dir", "excludes", "py_modules", "py_executable"})
# Serve config keys an Anyscale service spec may also have at its top
_SERVE_TOP_KEYS = frozenset({"applications", "http_options", "grpc_options", "logging_config",
                             "tracing_config"})
# the single-application format of old `serve build`: an application's keys at the top
_OLD_SERVE_KEYS = frozenset({"import_path", "runtime_env", "deployments", "host", "port",
                             "route_prefix", "name", "args"})


@dataclass(frozen=True)
class Site:
    """One runtime_env of the file."""

    prefix: JsonPath  # its JSON path in `Form.doc`
    data: object
    origin: Origin
    serve: JsonPath | None = None  # the Serve config holding it (Serve's URI rule applies)


@dataclass(frozen=True)
class ServeConfig:
    prefix: JsonPath
    data: object
    origin: Origin  # who deploys it: `serve deploy`, KubeRay, Anyscale
    single_app: bool = False  # one application's fields, not `applications:` (Anyscale)
    old_format: bool = False  # the single-application file of old `serve build`


@dataclass(frozen=True)
class Problem:
    """A mistake in the file's form itself, found while reading it (RTE186)."""

    code: str
    path: JsonPath
    message: str
    hint: str
    ray_error: bool  # the tool that reads the form (kubectl, serve deploy) refuses the file


@dataclass
class Form:
    kind: str  # FileReport.kind
    doc: LoadedDoc  # positions cover the embedded documents too, in file lines
    sites: list[Site] = field(default_factory=list)
    serve_configs: list[ServeConfig] = field(default_factory=list)
    errors: list[tuple[JsonPath, ParseError]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def is_kuberay(data: object) -> bool:
    return (isinstance(data, dict) and isinstance(data.get("apiVersion"), str)
            and data["apiVersion"].startswith("ray.io/") and data.get("kind") in KUBERAY_KINDS)


def read(doc: LoadedDoc) -> Form | None:
    """The file's form; None when it does not parse (Ray's parse error is the finding)."""
    if doc.error is not None:
        return _manifests(doc)
    data = doc.data
    if is_kuberay(data):
        form = Form("kuberay", doc)
        _kuberay(form, data, ())  # type: ignore[arg-type]
        return form
    anyscale = _anyscale(doc, data) if isinstance(data, dict) else None
    return anyscale or _ray_form(doc)


def _manifests(doc: LoadedDoc) -> Form | None:
    """Several `---` documents (Ray refuses them) that are KubeRay manifests."""
    if doc.error is None or doc.error.kind != "ComposerError" or doc.text is None:
        return None
    documents = load_documents(doc.text, doc.path)
    if documents.error is not None or not isinstance(documents.data, list) or \
            not any(is_kuberay(d) for d in documents.data):
        return None
    form = Form("kuberay", documents)
    for index, manifest in enumerate(documents.data):
        if is_kuberay(manifest):
            _kuberay(form, manifest, (index,))
    return form


def _ray_form(doc: LoadedDoc) -> Form:
    """The forms Ray's own tools read: a runtime_env, a job spec, a Serve config."""
    data = doc.data
    if is_old_serve(data):
        form = Form("serve", doc)
        _serve(form, data, (), "serve", single_app=True, old_format=True)
        return form
    kind = document_kind(doc)
    if kind == "serve":
        form = Form("serve", doc)
        _serve(form, data, (), "serve")
        return form
    if kind == "job" and isinstance(data, dict):
        if set(data) == {"runtime_env"}:
            return Form("wrapped", doc, [Site((), data, "wrapped")])
        value = data["runtime_env"]
        return Form("job", doc, [] if value is None else [Site(("runtime_env",), value, "job")])
    return Form("runtime_env", doc, [Site((), data, "runtime_env")])


def is_old_serve(data: object) -> bool:
    """`import_path:` at the top with an application's other keys, no `applications:`."""
    if not isinstance(data, dict) or not isinstance(data.get("import_path"), str):
        return False
    return {k for k in data if isinstance(k, str)} <= _OLD_SERVE_KEYS and \
        bool(set(data) & {"deployments", "host", "port", "route_prefix", "runtime_env"})


def _name(manifest: dict[str, Any]) -> str:
    meta = manifest.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return f"{manifest['kind']} {name}" if name else str(manifest["kind"])


def _kuberay(form: Form, manifest: dict[str, Any], at: JsonPath) -> None:
    from rtenv_cli.core.spec.embedded import embed

    spec = manifest.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    kind = manifest["kind"]
    what = _name(manifest)
    if kind == "RayCronJob":
        template = spec.get("jobTemplate")
        if isinstance(template, dict) and _rayjob(form, template, (*at, "spec", "jobTemplate"),
                                                  what):
            return
        form.notes.append(f"{what}: no spec.jobTemplate.runtimeEnvYAML, so no runtime_env to "
                          "check")
    elif kind == "RayJob" and _rayjob(form, spec, (*at, "spec"), what):
        return
    elif kind == "RayService" and isinstance(spec.get("serveConfigV2"), str):
        found = embed(form.doc, (*at, "spec", "serveConfigV2"), spec["serveConfigV2"])
        if found.error is not None:
            form.errors.append((found.prefix, found.error))
        elif isinstance(found.data, dict):
            _serve(form, found.data, found.prefix, "kuberay")
    elif kind == "RayCluster":
        form.notes.append(f"{what}: a RayCluster holds no runtime_env (jobs and Serve "
                          "applications bring their own)")
    else:
        holder = "spec.runtimeEnvYAML" if kind == "RayJob" else "spec.serveConfigV2"
        form.notes.append(f"{what}: no {holder}, so no runtime_env to check")


def _rayjob(form: Form, spec: dict[str, Any], at: JsonPath, what: str) -> bool:
    """A RayJob spec's runtime_env (a RayCronJob's `jobTemplate` is one); False when it has
    none."""
    from rtenv_cli.core.spec.embedded import embed

    value = spec.get("runtimeEnvYAML")
    old = spec.get("runtimeEnv")
    if isinstance(value, str):
        _embedded_site(form, embed(form.doc, (*at, "runtimeEnvYAML"), value))
    elif isinstance(old, str):  # ray.io/v1alpha1: base64 of the runtime_env's JSON
        decoded = _base64(old)
        if decoded is None:
            form.notes.append(f"{what}: spec.runtimeEnv is not base64 text; not checked")
        else:
            _embedded_site(form, embed(form.doc, (*at, "runtimeEnv"), decoded, decoded=True))
    elif isinstance(old, dict):
        form.problems.append(Problem(
            "RTE186", (*at, "runtimeEnv"), f"{what}: `runtimeEnv` written as a mapping: "
            "KubeRay's RayJob has no such field (ray.io/v1 takes `runtimeEnvYAML`, a YAML "
            "string); the API server refuses the manifest", "write it as `runtimeEnvYAML: |` "
            "followed by the runtime_env's YAML, indented", ray_error=True))
    else:
        return False
    return True


def _embedded_site(form: Form, found: Any) -> None:
    if found.error is not None:
        form.errors.append((found.prefix, found.error))
    elif found.data is not None:
        form.sites.append(Site(found.prefix, found.data, "kuberay"))


def _base64(text: str) -> str | None:
    import base64
    import binascii

    try:
        return base64.b64decode(text.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _serve(form: Form, config: Any, prefix: JsonPath, origin: Origin, *,
           single_app: bool = False, old_format: bool = False) -> None:
    """A Serve config's runtime_envs: each application's and each deployment's."""
    form.serve_configs.append(ServeConfig(prefix, config, origin, single_app, old_format))
    if single_app:
        apps: list[tuple[JsonPath, Any]] = [(prefix, config)]
    else:
        listed = config.get("applications") if isinstance(config, dict) else None
        apps = [((*prefix, "applications", i), a) for i, a in enumerate(listed or [])]
    for app_path, app in apps:
        if not isinstance(app, dict):
            continue
        if app.get("runtime_env") is not None:
            form.sites.append(Site((*app_path, "runtime_env"),
                                   _without_upload_path(app["runtime_env"], origin), origin,
                                   prefix))
        deployments = app.get("deployments")
        for j, deployment in enumerate(deployments if isinstance(deployments, list) else []):
            options = deployment.get("ray_actor_options") if isinstance(deployment, dict) \
                else None
            if isinstance(options, dict) and options.get("runtime_env") is not None:
                form.sites.append(Site(
                    (*app_path, "deployments", j, "ray_actor_options", "runtime_env"),
                    _without_upload_path(options["runtime_env"], origin), origin, prefix))


def _without_upload_path(value: Any, origin: Origin) -> Any:
    if origin == "anyscale" and isinstance(value, dict) and UPLOAD_PATH in value:
        return {k: v for k, v in value.items() if k != UPLOAD_PATH}
    return value


def _anyscale(doc: LoadedDoc, data: dict[Any, Any]) -> Form | None:
    """Anyscale's job and service specs, older (`runtime_env:`, `ray_serve_config:`) and newer
    (runtime_env fields at the top level); None for any other file."""
    keys = {k for k in data if isinstance(k, str)}
    runtime_env = data.get("runtime_env")
    top = [k for k in ANYSCALE_RUNTIME_ENV_KEYS if k in data]
    marked = bool(keys & ANYSCALE_KEYS) or (isinstance(runtime_env, dict)
                                            and UPLOAD_PATH in runtime_env)
    if "ray_serve_config" in data:
        form = Form("anyscale-service", doc)
        config = data["ray_serve_config"]
        single = isinstance(config, dict) and "applications" not in config
        _serve(form, config, ("ray_serve_config",), "anyscale", single_app=single)
        return form
    # `image_uri` beside `entrypoint` is Anyscale's container image, not Ray's field
    imaged = "image_uri" in data and "runtime_env" not in data and \
        keys <= ANYSCALE_KEYS | ANYSCALE_SERVICE_KEYS | {"entrypoint", "tags"}
    if "entrypoint" in data and (marked or imaged or (top and "runtime_env" not in data)):
        form = Form("anyscale-job", doc)
        if isinstance(runtime_env, dict):
            form.sites.append(Site(("runtime_env",),
                                   _without_upload_path(runtime_env, "anyscale"), "anyscale"))
        elif top:
            form.sites.append(Site((), {k: data[k] for k in top}, "anyscale"))
        return form
    service = marked or (bool(keys & {"name", "image_uri"}) and
                         keys <= ANYSCALE_KEYS | ANYSCALE_SERVICE_KEYS | _SERVE_TOP_KEYS)
    if service and isinstance(data.get("applications"), list) and \
            not keys & (ALL_TOP_LEVEL_KEYS - set(ANYSCALE_RUNTIME_ENV_KEYS) - {"image_uri"}):
        form = Form("anyscale-service", doc)
        if top:
            form.sites.append(Site((), {k: data[k] for k in top}, "anyscale"))
        _serve(form, {"applications": data["applications"]}, (), "anyscale")
        return form
    return None

"""spec/forms.py and spec/embedded.py: which form a file is, where its runtime_envs sit, and
positions inside YAML strings moved to file lines."""

from __future__ import annotations

import pytest

from rtenv_cli.core.spec.forms import read
from rtenv_cli.core.spec.loader import load_documents, load_text


def _sites(text: str) -> tuple[str, list[tuple[tuple[object, ...], str]]]:
    form = read(load_text(text, "f.yaml"))
    assert form is not None
    return form.kind, [(s.prefix, s.origin) for s in form.sites]


@pytest.mark.parametrize(("text", "kind", "sites"), [
    ("env_vars: {A: '1'}\n", "runtime_env", [((), "runtime_env")]),
    ("runtime_env:\n  pip: [x]\n", "wrapped", [((), "wrapped")]),
    ("entrypoint: python x.py\nruntime_env: {pip: [x]}\n", "job", [(("runtime_env",), "job")]),
    ("applications:\n  - import_path: m:a\n    runtime_env: {pip: [x]}\n"
     "    deployments:\n      - name: D\n        ray_actor_options:\n"
     "          runtime_env: {env_vars: {A: '1'}}\n", "serve",
     [(("applications", 0, "runtime_env"), "serve"),
      (("applications", 0, "deployments", 0, "ray_actor_options", "runtime_env"), "serve")]),
    ("name: j\nentrypoint: python x.py\ncompute_config: c\nruntime_env: {working_dir: .}\n",
     "anyscale-job", [(("runtime_env",), "anyscale")]),
    ("entrypoint: python x.py\nworking_dir: .\nrequirements: [x]\n", "anyscale-job",
     [((), "anyscale")]),
    ("name: s\nray_serve_config:\n  import_path: m:a\n  runtime_env: {pip: [x]}\n",
     "anyscale-service", [(("ray_serve_config", "runtime_env"), "anyscale")]),
    ("apiVersion: ray.io/v1\nkind: RayJob\nspec:\n  runtimeEnvYAML: |\n    pip: [x]\n",
     "kuberay", [(("spec", "runtimeEnvYAML"), "kuberay")]),
    # issue 24: a RayCronJob's RayJob spec is its jobTemplate; several documents too
    ("apiVersion: ray.io/v1\nkind: RayCronJob\nspec:\n  schedule: '0 3 * * *'\n"
     "  jobTemplate:\n    runtimeEnvYAML: |\n      pip: [x]\n---\napiVersion: v1\n"
     "kind: ConfigMap\ndata: {a: b}\n",
     "kuberay", [((0, "spec", "jobTemplate", "runtimeEnvYAML"), "kuberay")]),
    # an Anyscale service told by its keys, without compute_config
    ("name: s\nimage_uri: anyscale/ray:2.60.0\nworking_dir: .\napplications:\n"
     "  - import_path: m:a\n    runtime_env: {pip: [x]}\n", "anyscale-service",
     [((), "anyscale"), (("applications", 0, "runtime_env"), "anyscale")]),
    # an Anyscale job with its image, no compute_config: image_uri is Anyscale's, not Ray's
    ("name: j\nentrypoint: python x.py\nimage_uri: anyscale/ray:2.60.0\n", "anyscale-job", []),
    # the single-application format of old `serve build`
    ("import_path: m:a\nhost: 0.0.0.0\nport: 8000\nruntime_env: {pip: [x]}\n", "serve",
     [(("runtime_env",), "serve")]),
    ("tracing_config: {}\napplications:\n  - import_path: m:a\n", "serve", []),
])
def test_forms(text: str, kind: str, sites: list[tuple[tuple[object, ...], str]]) -> None:
    assert _sites(text) == (kind, sites)


def test_anyscale_upload_path_never_reaches_ray() -> None:
    form = read(load_text("entrypoint: x\nruntime_env: {working_dir: ., upload_path: s3://b}\n",
                          "j.yaml"))
    assert form is not None
    [site] = form.sites
    assert site.data == {"working_dir": "."}


@pytest.mark.parametrize("indicator", ["|", "|-", "|+", "|2", "|  # a comment"])
def test_literal_blocks_map_to_file_lines(indicator: str) -> None:
    pad = "  " if indicator == "|2" else ""
    text = ("apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: j}\nspec:\n"
            f"  runtimeEnvYAML: {indicator}\n"
            f"  {pad}  pip:\n  {pad}    - requests\n\n  {pad}  env_vars: {{A: '1'}}\n")
    form = read(load_text(text, "j.yaml"))
    assert form is not None
    positions = form.doc.positions
    prefix = ("spec", "runtimeEnvYAML")
    pip = positions.value((*prefix, "pip", 0))
    assert pip is not None
    assert (pip.line, pip.column) == (7, 9 + len(pad))
    key = positions.key((*prefix, "env_vars", "A"))
    assert key is not None
    assert (key.line, key.column) == (9, 16 + len(pad))


def test_styles_without_a_line_map_point_at_the_string() -> None:
    text = ("apiVersion: ray.io/v1\nkind: RayJob\nspec:\n  runtimeEnvYAML: >\n"
            "    pip: [requests]\n")
    form = read(load_text(text, "j.yaml"))
    assert form is not None
    span = form.doc.positions.value(("spec", "runtimeEnvYAML", "pip", 0))
    assert span is not None
    assert span.line == 4  # the folded string's own position


def test_several_documents_are_indexed() -> None:
    doc = load_documents("a: 1\n---\nb:\n  - x\n", "m.yaml")
    assert doc.data == [{"a": 1}, {"b": ["x"]}]
    span = doc.positions.value((1, "b", 0))
    assert span is not None
    assert span.line == 4
    assert load_documents("a: [1\n---\n", "m.yaml").error is not None


def test_rayjob_runtime_env_as_a_mapping_is_a_problem() -> None:
    """KubeRay's RayJob CRD (ray.io/v1) has `runtimeEnvYAML: string` and no `runtimeEnv`."""
    form = read(load_text("apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: t}\nspec:\n"
                          "  runtimeEnv:\n    envVars: {A: '1'}\n", "j.yaml"))
    assert form is not None
    [problem] = form.problems
    assert (problem.code, problem.path, problem.ray_error) == ("RTE186", ("spec", "runtimeEnv"),
                                                               True)
    assert "runtimeEnvYAML" in problem.message

"""Each runtime_env of a file checked the way it reaches Ray (spec/forms.py names the forms):
the engine's `check_env` gives Ray's verdict and the rules; this module adjusts them per form.

- wrapped (`runtime_env:` alone): Ray's verdict is for the file as written, one unknown plugin
  field that applies nothing (RTE106); the fields inside are checked as they would apply once
  unwrapped, without deciding the verdict;
- Anyscale: Anyscale uploads a local working_dir to its own storage (`upload_path`), so the
  dashboard's 100 MiB upload limit does not apply;
- every form: embedded YAML that does not parse (KubeRay) is Ray's parse error, in file lines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rtenv_cli.core.lint.context import diag_at
from rtenv_cli.core.lint.diagnostic import Diagnostic, Severity
from rtenv_cli.core.spec.forms import Form, Site
from rtenv_cli.core.spec.loader import Positions
from rtenv_cli.core.spec.pipeline_result import Api, PipelineResult

# check_env bound to one file: (runtime_env, its JSON path) -> (findings, Ray's result)
Check = Callable[[Any, tuple[Any, ...]], tuple[list[Diagnostic], PipelineResult]]

_SHOWN_FIELDS = 4


def check_site(site: Site, check: Check, api: Api, positions: Positions
               ) -> tuple[list[Diagnostic], PipelineResult]:
    if site.origin == "wrapped":
        return _wrapped(site, check, api, positions)
    data = site.data
    if site.serve is not None and site.origin != "anyscale":
        data = _remote_only(site)
    found, result = check(data, site.prefix)
    if site.origin == "anyscale":  # uploaded by Anyscale to cloud storage, not the dashboard
        found = [d for d in found if not (d.code == "RTE150" and d.ray_error)]
    return found, result


def _remote_only(site: Site) -> Any:
    """A Serve runtime_env with the local paths Serve refuses (RTE181) replaced by a stand-in
    URI: Serve never packages them, so nothing about packaging them applies."""
    from rtenv_cli.core.lint.serve_schema import uri_problems
    from rtenv_cli.core.spec.package_stage import PLACEHOLDER_URI

    local = [path[len(site.prefix):] for path, _message in uri_problems(site)]
    if not local or not isinstance(site.data, dict):
        return site.data
    data = dict(site.data)
    for rel in local:
        if rel == ("working_dir",):
            data["working_dir"] = PLACEHOLDER_URI
        elif rel[0] == "py_modules" and isinstance(data.get("py_modules"), list):
            mods = list(data["py_modules"]) if data["py_modules"] is site.data["py_modules"] \
                else data["py_modules"]
            mods[rel[1]] = PLACEHOLDER_URI
            data["py_modules"] = mods
    return data


def _api_words(api: Api) -> str:
    return ("`ray job submit --runtime-env` reads" if api == "job-submit" else
            "`ray.init(runtime_env=<this file>)` reads")


def _wrapped(site: Site, check: Check, api: Api, positions: Positions
             ) -> tuple[list[Diagnostic], PipelineResult]:
    data = site.data
    assert isinstance(data, dict)  # noqa: S101 - forms.read makes wrapped sites of mappings
    outer, result = check(data, ())  # Ray's reading: the verdict
    outer = [d for d in outer if not (d.code == "RTE101" and d.json_path == ("runtime_env",))]
    inner_data = data["runtime_env"]
    inner: list[Diagnostic] = []
    if isinstance(inner_data, dict) and inner_data:
        found, _ = check(inner_data, ("runtime_env",))
        inner = [_unwrapped(d) for d in found if d.code != "RTE009"]
    fields = [str(k) for k in inner_data] if isinstance(inner_data, dict) else []
    lost = ", ".join(f"`{f}`" for f in fields[:_SHOWN_FIELDS]) + (
        " ..." if len(fields) > _SHOWN_FIELDS else "")
    message = (f"the file holds only `runtime_env:`: {_api_words(api)} it as ONE unknown plugin "
               f"field named `runtime_env`, so NOTHING in it applies"
               + (f" ({lost} never reach the workers)" if lost else "")
               + "; Ray still stores all of it, secrets included, in the GCS")
    wrapper = diag_at(positions, "RTE106", message, ("runtime_env",),
                      hint="delete the `runtime_env:` line and dedent the fields under it; keep "
                      "the wrapper only in a job spec that also has `entrypoint:`")
    return [wrapper, *outer, *inner], result


def _unwrapped(diag: Diagnostic) -> Diagnostic:
    """A finding inside the wrapper: it applies once unwrapped, so it cannot decide the
    verdict of the file as written."""
    if not diag.ray_error:
        return diag
    return replace(diag, ray_error=False, message=f"{diag.message} (once unwrapped)")


def form_findings(form: Form) -> list[Diagnostic]:
    """Findings of the file's form itself: embedded YAML that does not parse, and the form's
    own mistakes (a KubeRay field of the wrong shape)."""
    out = [diag_at(form.doc.positions, p.code, p.message, p.path, hint=p.hint,
                   ray_error=p.ray_error) for p in form.problems]
    for prefix, error in form.errors:
        span = error.span
        out.append(Diagnostic(
            "RTE001", Severity.ERROR, f"{error.kind}: {error.message} (in the YAML string of "
            f"`{'.'.join(str(p) for p in prefix)}`)", span.line if span else None,
            span.column if span else None, span.end_line if span else None,
            span.end_column if span else None, "fix the embedded YAML: KubeRay parses it "
            "before anything reaches Ray", prefix, True))
    return out

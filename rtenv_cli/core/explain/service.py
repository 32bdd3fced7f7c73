"""Glue for `rtenv explain`: options -> ExplainRequest -> preview + GPU map + reuse verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rtenv_cli.core.errors import UsageError
from rtenv_cli.core.explain.allocation import (
    ResourceRequest,
    check_amount,
    parse_amount,
    parse_ids,
    parse_resource_arg,
    request_from_amount,
    request_from_ids,
)
from rtenv_cli.core.explain.worker_env import EnvPreview, ExplainRequest, SecretTest, predict


def load_runtime_env(path: Path, app: str | None = None) -> dict[str, object]:
    """The runtime_env of `path` (bare, a job spec, or a Serve config's application `app`)."""
    from rtenv_cli.core.spec.runtime_env_file import load_runtime_env_file

    return load_runtime_env_file(path, app=app).runtime_env


def node_env_from(pairs: Sequence[str], env_file: Path | None,
                  current: Mapping[str, str] | None) -> dict[str, str] | None:
    if not pairs and env_file is None and current is None:
        return None
    env: dict[str, str] = dict(current or {})
    if env_file is not None:
        from rtenv_cli.core.spec.loader import read_text

        lines = read_text(env_file, "--node-env-file").splitlines()
        for raw in lines:
            line = raw.strip()
            if line and not line.startswith("#"):
                k, _, v = line.removeprefix("export ").partition("=")
                env[k.strip()] = v.strip().strip("'\"")
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise UsageError(f"--node-env {pair!r}: expected K=V", hint="e.g. --node-env "
                             "CUDA_VISIBLE_DEVICES=3,5,6,7")
        env[k] = v
    return env


RuntimeEnvSource = Path | Mapping[str, object]  # a file, or a runtime_env already in memory


def _runtime_env(source: RuntimeEnvSource, app: str | None = None) -> dict[str, object]:
    if isinstance(source, Mapping):
        if app is not None:
            raise UsageError("--app needs a Serve config file", hint="give the Serve config's "
                             "path, or the application's runtime_env itself")
        return dict(source)
    return load_runtime_env(Path(source), app)


def build_request(*, runtime_env: RuntimeEnvSource | None = None,
                  job_runtime_env: RuntimeEnvSource | None = None,
                  kind: str = "task", num_cpus: float | None = None, gpus: str | None = None,
                  num_gpus: float | None = None, resources: Sequence[str] = (),
                  gpu_vendor: str = "nvidia", accelerator_type: str | None = None,
                  node_env: Mapping[str, str] | None = None,
                  app: str | None = None) -> ExplainRequest:
    if gpus is not None and num_gpus is not None:
        raise UsageError("give --gpus or --num-gpus, not both")
    for what, amount in (("--num-cpus", num_cpus), ("--num-gpus", num_gpus)):
        if amount is not None:
            check_amount(amount, what)
    reqs: list[ResourceRequest] = []
    if gpus is not None:
        reqs.append(request_from_ids("GPU", parse_ids(gpus, "--gpus")))
    elif num_gpus is not None:
        reqs.append(request_from_amount("GPU", num_gpus))
    reqs += [parse_resource_arg(r) for r in resources]
    task = _runtime_env(runtime_env, app) if runtime_env is not None else None
    if app is not None and runtime_env is None:
        raise UsageError("--app needs a Serve config file", hint="rtenv explain serve.yaml "
                         "--app NAME")
    job = _runtime_env(job_runtime_env) if job_runtime_env is not None else None
    if job is None and task is not None:
        job, task = task, None  # a single file is the job-level runtime_env
    return ExplainRequest(kind=kind, num_cpus=num_cpus, resources=tuple(reqs),
                          gpu_vendor=gpu_vendor, accelerator_type=accelerator_type,
                          job_runtime_env=job, task_runtime_env=task,
                          node_env=dict(node_env or {}), node_env_known=node_env is not None)


def parse_compare(spec: str, base: ExplainRequest) -> ExplainRequest:
    """`num_cpus=1 gpus=0,1 num_gpus=0.5 TPU=4 kind=actor` -> a second request."""
    num_cpus, kind = base.num_cpus, base.kind
    reqs: dict[str, ResourceRequest] = {}
    for tok in spec.replace(";", " ").split():
        k, _, v = tok.partition("=")
        if k in ("num_cpus", "cpus"):
            num_cpus = parse_amount(v, "--compare num_cpus")
        elif k == "kind":
            kind = v
        elif k == "gpus":
            reqs["GPU"] = request_from_ids("GPU", parse_ids(v, "--compare gpus"))
        elif k == "num_gpus":
            reqs["GPU"] = request_from_amount("GPU", parse_amount(v, "--compare num_gpus"))
        else:
            r = parse_resource_arg(tok)
            reqs[r.resource] = r
    from dataclasses import replace
    return replace(base, num_cpus=num_cpus, kind=kind, resources=tuple(reqs.values()))


def _nvidia_driver() -> bool:
    import os

    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg"))


@dataclass(frozen=True)
class ExplainResult:
    preview: EnvPreview
    gpu_map: dict[str, object] | None
    reuse_key: dict[str, object]
    compare: dict[str, object] | None

    @property
    def env(self) -> dict[str, str | None]:
        """The worker's environment (None: the variable is unset)."""
        return self.preview.env

    @property
    def sources(self) -> dict[str, str]:
        """Where each variable of `env` comes from (node env, job/task runtime_env, ray: ...)."""
        return self.preview.sources

    def to_dict(self) -> dict[str, object]:
        d = self.preview.to_dict()
        d["devices"] = {"allocations": d["devices"], "gpu_map": self.gpu_map}
        d["reuse_key"] = self.reuse_key
        if self.compare is not None:
            d["compare"] = self.compare
        return d


def explain(req: ExplainRequest, *, is_secret: SecretTest | None, compare: str | None = None,
            gpu_map: bool = True, pynvml: object = None) -> ExplainResult:
    """The preview of `req`; values `is_secret` (validate's detector, lint/secrets.py, which
    sits above this package) calls secrets are redacted, none when it is None
    (--show-secrets)."""
    from rtenv_cli.core.explain.reuse import compare as compare_fn
    from rtenv_cli.core.explain.reuse import reuse_key

    preview = predict(req)
    gmap: dict[str, object] | None = None
    if gpu_map and req.gpu_vendor == "nvidia" and pynvml is None and not _nvidia_driver():
        # cheap pre-check: without the driver NVML can only fail; skip importing it (startup)
        gmap = {"nvml": {"available": False, "reason": "no NVIDIA driver on this machine",
                         "driver": None, "gpus": []}, "rows": []}
    elif gpu_map and req.gpu_vendor == "nvidia":
        from rtenv_cli.core.explain import nvml

        report = nvml.read_gpus(pynvml)
        gmap = {"nvml": report.to_dict(), "rows": []}
        if report.available:
            cvd = preview.env.get("CUDA_VISIBLE_DEVICES")
            ids = cvd.split(",") if cvd else [str(g.nvml_index) for g in report.gpus]
            rows, warns = nvml.gpu_map(report, ids, preview.env.get("CUDA_DEVICE_ORDER"))
            gmap["rows"] = rows
            preview.warnings.extend(warns)
    verdict = compare_fn(preview, predict(parse_compare(compare, req))).to_dict() \
        if compare else None
    if is_secret is not None:
        preview = preview.redacted(is_secret)
    return ExplainResult(preview, gmap, reuse_key(preview), verdict)

"""`rtenv explain` against real Ray 2.60.0 workers: every family, fractions, zeros, NOSET
switches, env_vars overrides, job/task merges, OMP values, a node with a preset visible list.

All probes of a head run in ONE driver (rtenv_cli.core.explain.verify.run_probes), sequentially
so Ray's first-fit slot ids hold; each is compared with the in-process prediction.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

import pytest

from rtenv_cli.core.explain import accelerators as acc
from rtenv_cli.core.explain.allocation import request_from_amount
from rtenv_cli.core.explain.verify import compared_keys, diff, run_probes
from rtenv_cli.core.explain.worker_env import ExplainRequest, predict
from tests.support.ray_head import ray_head

pytestmark = [pytest.mark.ray, pytest.mark.slow]

FAMILY_VARS = sorted({f.env_var for f in acc.families("nvidia") if f.env_var}
                     | {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS", "OMP_NUM_THREADS"})


def R(kind: str = "task", cpus: float | None = None, task_env: dict | None = None,
      **res: float) -> ExplainRequest:
    return ExplainRequest(kind=kind, num_cpus=cpus, task_runtime_env=task_env,
                          resources=tuple(request_from_amount(k, v) for k, v in res.items()))


CLEAN = [
    R(), R(GPU=1), R(GPU=2), R(GPU=0.5), R(GPU=0), R(GPU=8),
    R(neuron_cores=2), R(TPU=1), R(TPU=2), R(TPU=4), R(TPU=8), R(HPU=2), R(NPU=2), R(NPU=0.5),
    R(RBLN=1), R(TTNPU=2), R(FURIOSA=2), R(MBLT=1),
    R(GPU=1, neuron_cores=1, TPU=1),
    R(cpus=0.5), R(cpus=1), R(cpus=2), R(cpus=1.5), R(cpus=0),
    R("actor"), R("actor", cpus=2), R("actor", cpus=0.5, GPU=1), R("actor", HPU=1),
    R(GPU=1, task_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}),
    R(TPU=2, task_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS": "true"}}),
    R(neuron_cores=1,
      task_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES": "1"}}),
    R(RBLN=1, task_env={"env_vars": {"RAY_EXPERIMENTAL_NOSET_RBLN_RT_VISIBLE_DEVICES": "1"}}),
    R(GPU=0, task_env={"env_vars": {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}}),
    R(GPU=0, task_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "4"}}),
    R(GPU=1, task_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "7"}}),
    R(GPU=2, task_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "5,6"}}),
    R(GPU=2, task_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "2"}}),
    R(cpus=2, task_env={"env_vars": {"OMP_NUM_THREADS": "16"}}),
    R(task_env={"env_vars": {"Z1": "z", "A1": "${Z1}/a", "Q": "$UNSET:${UNSET}:${low}"}}),
    R(task_env={"env_vars": {"PYTHONPATH": "/u/pp"}}),
    R("actor", FURIOSA=1, task_env={"env_vars": {"MY_VAR": "x"}}),
]
JOB = {"env_vars": {"A": "job", "B": "job", "OMP_NUM_THREADS": "5"}}
WITH_JOB = [
    R(task_env={"env_vars": {"B": "task", "C": "task"}}),
    R("actor", task_env={"env_vars": {"B": "task2"}}),
    R(cpus=2),
    R(GPU=1, task_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "2,3"}}),
]
NODE = {"CUDA_VISIBLE_DEVICES": "3,5,6,7", "NEURON_RT_VISIBLE_CORES": "4,5,6,7",
        "HABANA_VISIBLE_MODULES": "", "NODE_FOO": "nodeval", "OMP_NUM_THREADS": "7",
        "PYTHONPATH": "/nodepp"}
PRESET = [
    R(GPU=1), R(GPU=2), R(GPU=4), R(GPU=0.5), R(GPU=0), R(neuron_cores=2), R(neuron_cores=4),
    R(GPU=1, task_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "6,7"}}),
    R(cpus=2, task_env={"env_vars": {"OMP_NUM_THREADS": "3"}}),
    R(task_env={"env_vars": {"E1": "${NODE_FOO}-x", "E2": "$NODE_FOO", "E3": "a:${PYTHONPATH}",
                             "NODE_FOO": "over"}}),
    R(task_env={"env_vars": {"PYTHONPATH": "/u/pp"}}),
    R(GPU=0, task_env={"env_vars": {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}}),
]


def _check(reqs: list[ExplainRequest], results: list[dict], node: dict[str, str]) -> list[str]:
    failures = []
    for req, res in zip(reqs, results, strict=True):
        assert "error" not in res, (req, res)
        preview = predict(req)
        assert not preview.errors, preview.errors
        keys = sorted(set(compared_keys(preview)) | set(FAMILY_VARS) | set(node))
        d = diff(preview, res["env"], keys)
        if d:
            shape = [(r.resource, r.amount) for r in req.resources]
            failures.append(f"{req.kind} cpus={req.num_cpus} {shape} {req.task_runtime_env}: {d}")
    return failures


def test_parity_clean_node(ray_cluster) -> None:
    env = ray_cluster.client_env()
    results = run_probes(ray_cluster.address, None, CLEAN, env=env)
    job_reqs = [replace(r, job_runtime_env=JOB, node_env_known=True) for r in WITH_JOB]
    results_job = run_probes(ray_cluster.address, JOB, job_reqs, env=env)
    failures = _check(CLEAN, results, {}) + _check(job_reqs, results_job, {})
    assert not failures, "\n".join(failures)
    assert len(CLEAN) + len(WITH_JOB) + len(PRESET) >= 40


SESSION_DIR = re.compile(r"[^:]*/session_[^/:]+(?=/runtime_resources/)")


def _shape(path: str) -> str:
    return SESSION_DIR.sub("<session_dir>", path)


def test_parity_preset_visible_list_node(tmp_path) -> None:
    wd, mod = tmp_path / "wd", tmp_path / "mymod"
    wd.mkdir()
    mod.mkdir()
    (wd / "a.txt").write_text("x")
    (mod / "__init__.py").write_text("")
    job = {"working_dir": str(wd), "py_modules": [str(mod)], "env_vars": {"PYTHONPATH": "/u/pp"}}
    # one driver per job runtime_env costs ~10 s here: one job, a task and an actor under it
    job_reqs = [replace(R(), job_runtime_env=job, node_env=NODE, node_env_known=True),
                replace(R("actor"), job_runtime_env=job, node_env=NODE, node_env_known=True)]
    with ray_head(num_gpus=4, resources={"neuron_cores": 4}, env=NODE) as head:
        env = {**os.environ, **head.client_env()}
        reqs = [replace(r, node_env=NODE, node_env_known=True) for r in PRESET]
        results = run_probes(head.address, None, reqs, env=env)
        pp_results = run_probes(head.address, job, job_reqs, env=env)
    failures = _check(reqs, results, NODE)
    assert not failures, "\n".join(failures)
    for req, res in zip(job_reqs, pp_results, strict=True):
        assert "error" not in res, res
        preview = predict(req)
        # exact package names (Ray's content hashes); only the session dir is substituted
        assert _shape(res["env"]["PYTHONPATH"]) == _shape(preview.env["PYTHONPATH"])
        assert _shape(res["cwd"]) == _shape(preview.cwd)
    assert re.fullmatch(r"<session_dir>/runtime_resources/py_modules_files/_ray_pkg_[0-9a-f]{16}:"
                        r"<session_dir>/runtime_resources/working_dir_files/_ray_pkg_[0-9a-f]{16}"
                        r":/u/pp:/nodepp:/nodepp", _shape(pp_results[0]["env"]["PYTHONPATH"]))

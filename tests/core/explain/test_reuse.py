from __future__ import annotations

from rtenv_cli.core.explain.allocation import request_from_amount, request_from_ids
from rtenv_cli.core.explain.reuse import compare
from rtenv_cli.core.explain.worker_env import ExplainRequest, predict


def test_half_and_one_cpu_share_omp() -> None:
    v = compare(predict(ExplainRequest(num_cpus=0.5)), predict(ExplainRequest(num_cpus=1)))
    assert v.ray_2_60
    assert v.pr_63327
    assert v.same_effective_env


def test_different_gpu_ids_do_not() -> None:
    a = predict(ExplainRequest(resources=(request_from_ids("GPU", (0,)),)))
    b = predict(ExplainRequest(resources=(request_from_ids("GPU", (1,)),)))
    v = compare(a, b)
    assert v.ray_2_60
    assert not v.pr_63327
    assert any("CUDA_VISIBLE_DEVICES" in r for r in v.reasons)


def test_different_runtime_env_or_actor() -> None:
    a = predict(ExplainRequest(job_runtime_env={"env_vars": {"A": "1"}}))
    b = predict(ExplainRequest(job_runtime_env={"env_vars": {"A": "2"}},
                               resources=(request_from_amount("GPU", 0),)))
    assert not compare(a, b).ray_2_60
    assert not compare(predict(ExplainRequest(kind="actor")), a).ray_2_60

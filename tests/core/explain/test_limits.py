"""`rtenv explain` shows a runtime_env's `rtenv.limits`."""

from __future__ import annotations

from rtenv_cli.core.explain.limits import SECTION
from rtenv_cli.core.explain.worker_env import ExplainRequest, predict


def test_limits_are_shown_with_their_bytes_and_cpu_quota() -> None:
    p = predict(ExplainRequest(
        job_runtime_env={"rtenv": {"pip": ["six"], "limits": {"memory": "4GB", "cpus": 2}}}))
    text = "\n".join(p.to_dict()["notes"][SECTION])  # type: ignore[index]
    assert "own cgroup" in text
    assert "memory 4GB = 4000000000 bytes" in text
    assert "CPU quota 200000 us per 100000 us period" in text
    assert p.errors == []


def test_bad_limits_are_an_error_and_no_limits_no_section() -> None:
    p = predict(ExplainRequest(task_runtime_env={"rtenv": {"limits": {"cpus": -1}}}))
    # one error, from the plugin's parse of the whole field (explain/rtenv_env.py)
    assert p.errors == ["runtime_env['rtenv']['limits']['cpus']: -1 is not a positive number "
                        "of CPUs (the node's plugin refuses it: RuntimeEnvSetupError)"]
    assert SECTION not in predict(ExplainRequest(job_runtime_env={"env_vars": {"A": "1"}}))\
        .to_dict()["notes"]  # type: ignore[operator]

from __future__ import annotations

from rtenv_cli.core.explain.allocation import parse_resource_arg, request_from_amount
from rtenv_cli.core.explain.worker_env import ExplainRequest, merge_runtime_envs, predict


def req(**kw) -> ExplainRequest:
    res = kw.pop("res", {})
    return ExplainRequest(resources=tuple(request_from_amount(k, v) for k, v in res.items()),
                          node_env_known=True, **kw)


def test_preset_node_zero_gpu_sees_all_and_warns() -> None:
    p = predict(req(node_env={"CUDA_VISIBLE_DEVICES": "3,5,6,7"}, res={"GPU": 0}))
    assert p.env["CUDA_VISIBLE_DEVICES"] == "3,5,6,7"
    assert any("sees ALL" in w for w in p.warnings)


def test_remap_and_whole_list_collapse() -> None:
    p = predict(req(node_env={"CUDA_VISIBLE_DEVICES": "3,5,6,7"}, res={"GPU": 1}))
    assert p.env["CUDA_VISIBLE_DEVICES"] == "3"
    p = predict(req(task_runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": "2"}}, res={"GPU": 2}))
    assert p.env["CUDA_VISIBLE_DEVICES"] == "2"
    assert any("WHOLE list" in w for w in p.warnings)


def test_validation_errors() -> None:
    p = predict(req(res={"GPU": 1.5, "TPU": 3, "HPU": 0.5},
                    task_runtime_env={"working_dir": "./src"}))
    text = " ".join(p.errors)
    assert "whole numbers" in text
    assert "TPU" in text
    assert "HPU" in text
    assert "not a valid URI" in text


def test_furiosa_prefix_tpu_bounds_override_on_zero() -> None:
    assert predict(req(res={"FURIOSA": 2})).env["FURIOSA_DEVICES"] == "npu:0,npu:1"
    p = predict(req(res={"TPU": 2}))
    assert (p.env["TPU_VISIBLE_CHIPS"], p.env["TPU_CHIPS_PER_HOST_BOUNDS"]) == ("0,1", "1,2,1")
    p = predict(req(task_runtime_env={"env_vars": {"RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "1"}}))
    assert p.env["CUDA_VISIBLE_DEVICES"] == ""
    assert p.env["TPU_VISIBLE_CHIPS"] is None


def test_omp_rules() -> None:
    assert predict(req(num_cpus=3.7)).env["OMP_NUM_THREADS"] == "3"
    assert predict(req(kind="actor")).env["OMP_NUM_THREADS"] == "1"
    p = predict(req(node_env={"OMP_NUM_THREADS": "7"}, num_cpus=2))
    assert p.env["OMP_NUM_THREADS"] == "7"


def test_merge_and_pythonpath_duplication() -> None:
    merged, origin = merge_runtime_envs({"env_vars": {"A": "j", "B": "j"}, "working_dir": "x"},
                                        {"env_vars": {"B": "t"}})
    assert merged["env_vars"] == {"A": "j", "B": "t"}
    assert origin == {"A": "job runtime_env", "B": "task runtime_env"}
    p = predict(req(node_env={"PYTHONPATH": "/n"},
                    job_runtime_env={"working_dir": "gcs://_ray_pkg_a.zip",
                                     "env_vars": {"PYTHONPATH": "/u"}},
                    task_runtime_env={"py_modules": ["gcs://_ray_pkg_b.zip"]}))
    assert p.pythonpath[2:] == ["/u", "/n", "/n"]
    assert p.pythonpath[0].endswith("py_modules_files/_ray_pkg_b")
    assert p.cwd.endswith("working_dir_files/_ray_pkg_a")


def test_amd_rocr_without_hip_and_cuda_hip_conflict() -> None:
    p = predict(req(gpu_vendor="amd", node_env={"ROCR_VISIBLE_DEVICES": "0"}, res={"GPU": 1}))
    assert any("ROCR" in e for e in p.errors)
    p = predict(req(gpu_vendor="amd", node_env={"CUDA_VISIBLE_DEVICES": "1"}, res={"GPU": 1}))
    assert p.env["HIP_VISIBLE_DEVICES"] == "0"
    assert any("disagree" in w for w in p.warnings)


def test_secrets_redacted_by_what_the_value_is() -> None:
    from rtenv_cli.core.lint.secrets import is_secret

    env = {"API_TOKEN": "s3cr3tvalue", "OPENAI": "sk-" + "a1" * 12,
           "TOKENIZERS_PARALLELISM": "false", "MAX_TOKENS": "4096", "HF_TOKEN_FILE": "/t"}
    p = predict(req(job_runtime_env={"env_vars": env})).redacted(is_secret)
    assert p.hidden == ("API_TOKEN", "OPENAI")
    assert p.env["API_TOKEN"] == p.env["OPENAI"] == "<redacted>"  # noqa: S105 - the marker
    assert "s3cr3tvalue" not in str(p.to_dict())
    assert env["OPENAI"] not in str(p.to_dict())
    for name in ("TOKENIZERS_PARALLELISM", "MAX_TOKENS", "HF_TOKEN_FILE"):
        assert p.env[name] == env[name]
        assert p.runtime_env["env_vars"][name] == env[name]  # type: ignore[index]


def test_resource_arg_forms() -> None:
    assert parse_resource_arg("TPU=4").slots == (0, 1, 2, 3)
    assert parse_resource_arg("HPU=[3]").slots == (3,)
    assert parse_resource_arg("neuron_cores=2,5").slots == (2, 5)


def test_precision_limit() -> None:
    p = predict(req(num_cpus=0.00001, res={"NPU": 0.00005}))
    assert len(p.errors) == 2
    assert not predict(req(num_cpus=0.12345, res={"NPU": 0.0001})).errors


def test_fields_the_preview_does_not_model_are_named_in_its_notes() -> None:
    """`image_uri` runs the worker in a container whose environment the preview cannot see: it
    says so (the field table's explain column), instead of silently showing the host's."""
    p = predict(req(job_runtime_env={"image_uri": "rayproject/ray:2.60.0",
                                     "env_vars": {"A": "1"}}))
    general = p.notes["(general)"]
    assert any(n.startswith("`image_uri` is not modelled") for n in general)
    assert p.env["A"] == "1"
    plain = predict(req(job_runtime_env={"env_vars": {"A": "1"}}))
    assert not any("not modelled" in n for n in plain.notes["(general)"])

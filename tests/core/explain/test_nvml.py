"""NVML behind a fake `pynvml` module object: several GPUs, MIG on, mixed models."""

from __future__ import annotations

import types

from rtenv_cli.core.explain import nvml


class NVMLError(Exception):
    pass


def fake_pynvml(gpus: list[dict]) -> types.SimpleNamespace:
    ns = types.SimpleNamespace(NVMLError=NVMLError, NVML_DEVICE_MIG_ENABLE=1)
    ns.nvmlInit = lambda: None
    ns.nvmlShutdown = lambda: None
    ns.nvmlSystemGetDriverVersion = lambda: "550.54"
    ns.nvmlDeviceGetCount = lambda: len(gpus)
    ns.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    ns.nvmlDeviceGetIndex = lambda h: h[1]
    ns.nvmlDeviceGetUUID = lambda h: gpus[h[1]]["uuid"] if h[0] == "gpu" else \
        gpus[h[1]]["mig"][h[2]]
    ns.nvmlDeviceGetName = lambda h: gpus[h[1]]["name"]
    ns.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=gpus[h[1]]["pci"].encode())
    ns.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=gpus[h[1]]["mem"])

    def mig_mode(h):
        if "mig" not in gpus[h[1]]:
            raise NVMLError("Not Supported")
        return [1, 1]

    def mig_handle(h, k):
        if k >= len(gpus[h[1]]["mig"]):
            raise NVMLError("Not Found")
        return ("mig", h[1], k)

    ns.nvmlDeviceGetMigMode = mig_mode
    ns.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7
    ns.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    ns.nvmlDeviceGetGpuInstanceId = lambda m: m[2] + 1
    ns.nvmlDeviceGetComputeInstanceId = lambda m: 0
    return ns


GPUS = [
    {"uuid": "GPU-aaa", "name": "NVIDIA T4", "pci": "00000000:17:00.0", "mem": 16 * 2**30},
    {"uuid": "GPU-bbb", "name": "NVIDIA A100 80GB", "pci": "00000000:65:00.0", "mem": 80 * 2**30,
     "mig": ["MIG-111", "MIG-222"]},
    {"uuid": "GPU-ccc", "name": "NVIDIA T4", "pci": "00000000:CA:00.0", "mem": 16 * 2**30},
]


def test_read_gpus_with_mig() -> None:
    rep = nvml.read_gpus(fake_pynvml(GPUS))
    assert rep.available
    assert rep.gpus[0].pci_bus_id == "00000000:17:00.0"
    assert rep.gpus[1].mig_enabled is True
    assert [m.uuid for m in rep.gpus[1].mig] == ["MIG-111", "MIG-222"]
    assert rep.gpus[0].mig_enabled is None


def test_mixed_models_order_warning_and_rows() -> None:
    rep = nvml.read_gpus(fake_pynvml(GPUS))
    rows, warns = nvml.gpu_map(rep, ["0", "1"], None)
    assert rows[0]["nvml_index"] == 1  # FASTEST_FIRST puts the A100 first
    assert any("CUDA_DEVICE_ORDER" in w for w in warns)
    rows, warns = nvml.gpu_map(rep, ["0", "1"], "PCI_BUS_ID")
    assert [r["nvml_index"] for r in rows] == [0, 1]
    assert not any("CUDA_DEVICE_ORDER" in w for w in warns)
    assert any("MIG on" in w for w in warns)
    rows, _ = nvml.gpu_map(rep, ["MIG-222", "GPU-ccc"], None)
    assert rows[0]["mig_instance"]["gpu_instance_id"] == 2
    assert rows[1]["nvml_index"] == 2


def test_nvml_unavailable() -> None:
    ns = fake_pynvml(GPUS)

    def boom():
        raise NVMLError("NVML Shared Library Not Found")

    ns.nvmlInit = boom
    rep = nvml.read_gpus(ns)
    assert not rep.available
    assert "Not Found" in rep.reason


def test_explain_gpu_map_follows_the_allocation() -> None:
    from rtenv_cli.core.explain.allocation import request_from_ids
    from rtenv_cli.core.explain.service import explain
    from rtenv_cli.core.explain.worker_env import ExplainRequest

    req = ExplainRequest(resources=(request_from_ids("GPU", (1,)),),
                         node_env={"CUDA_VISIBLE_DEVICES": "GPU-ccc,MIG-111"},
                         node_env_known=True)
    result = explain(req, pynvml=fake_pynvml(GPUS), is_secret=None)
    rows = result.gpu_map["rows"]
    assert [r["visible_id"] for r in rows] == ["MIG-111"]
    assert rows[0]["nvml_index"] == 1
    assert result.to_dict()["devices"]["gpu_map"]["nvml"]["driver"] == "550.54"

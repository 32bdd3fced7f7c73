"""The GPU map from NVML: the only module that imports `pynvml` (nvidia-ml-py).

Tests inject a fake module object through `read_gpus(pynvml=...)`; production code imports the
real one lazily so `rtenv explain` stays fast when NVML is absent.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class MigInstance:
    index: int
    uuid: str
    gpu_instance_id: int | None
    compute_instance_id: int | None

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "uuid": self.uuid, "gpu_instance_id": self.gpu_instance_id,
                "compute_instance_id": self.compute_instance_id}


@dataclass(frozen=True)
class Gpu:
    nvml_index: int
    uuid: str
    pci_bus_id: str
    name: str
    memory_total: int | None
    mig_enabled: bool | None        # None: the GPU does not support MIG
    mig: tuple[MigInstance, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"nvml_index": self.nvml_index, "uuid": self.uuid, "pci_bus_id": self.pci_bus_id,
                "name": self.name, "memory_total": self.memory_total,
                "mig_enabled": self.mig_enabled, "mig": [m.to_dict() for m in self.mig]}


@dataclass(frozen=True)
class NvmlReport:
    available: bool
    reason: str | None = None
    driver: str | None = None
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        return {"available": self.available, "reason": self.reason, "driver": self.driver,
                "gpus": [g.to_dict() for g in self.gpus]}


_DRIVER_MARKERS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")


def _s(value: object) -> str:
    # busId comes back as bytes in nvidia-ml-py 13 (not decoded by @convertStrBytes)
    return value.decode() if isinstance(value, bytes) else str(value)


def _mig(nv: Any, handle: Any) -> tuple[bool | None, tuple[MigInstance, ...]]:
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(handle)
    except nv.NVMLError:
        return None, ()
    if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
        return False, ()
    out: list[MigInstance] = []
    for k in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            m = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, k)
        except nv.NVMLError:
            continue  # empty slot (NVMLError_NotFound)
        gi = ci = None
        try:
            gi = nv.nvmlDeviceGetGpuInstanceId(m)
            ci = nv.nvmlDeviceGetComputeInstanceId(m)
        except nv.NVMLError:
            pass
        out.append(MigInstance(k, _s(nv.nvmlDeviceGetUUID(m)), gi, ci))
    return True, tuple(out)


def read_gpus(pynvml: Any = None) -> NvmlReport:
    """Every physical GPU in NVML (nvidia-smi) order; never raises."""
    nv: Any = pynvml
    if nv is None:
        if not any(os.path.exists(p) for p in _DRIVER_MARKERS):
            # without the NVIDIA driver pynvml can only fail: not worth its import
            # (benchmarks/results/fastpaths.json: "import pynvml")
            return NvmlReport(False, "no NVIDIA driver on this machine (no /dev/nvidiactl, "
                              "/proc/driver/nvidia)")
        try:
            import pynvml as imported  # heavy and optional: only when the map is asked for
        except ImportError:
            return NvmlReport(False, "nvidia-ml-py (pynvml) is not installed")
        nv = imported
    try:
        nv.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound and friends: report, don't crash
        return NvmlReport(False, f"NVML unavailable: {exc.__class__.__name__}: {exc}".strip())
    try:
        driver = _s(nv.nvmlSystemGetDriverVersion())
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            try:
                mem = int(nv.nvmlDeviceGetMemoryInfo(h).total)
            except nv.NVMLError:
                mem = None
            enabled, mig = _mig(nv, h)
            gpus.append(Gpu(int(nv.nvmlDeviceGetIndex(h)), _s(nv.nvmlDeviceGetUUID(h)),
                            _s(nv.nvmlDeviceGetPciInfo(h).busId), _s(nv.nvmlDeviceGetName(h)),
                            mem, enabled, mig))
        return NvmlReport(True, None, driver, tuple(gpus))
    finally:
        with contextlib.suppress(Exception):  # a failed shutdown changes nothing we report
            nv.nvmlShutdown()


def cuda_order(gpus: tuple[Gpu, ...], device_order: str | None) -> tuple[list[Gpu], bool]:
    """CUDA's enumeration of `gpus` and whether it differs from NVML's.

    PCI_BUS_ID: NVML order. Default FASTEST_FIRST: a speed heuristic we approximate by memory
    size, then PCI order (ties); on mixed models that is where the orders diverge.
    """
    by_pci = sorted(gpus, key=lambda g: g.pci_bus_id.lower())
    if (device_order or "FASTEST_FIRST") == "PCI_BUS_ID":
        order = by_pci
    else:
        order = sorted(by_pci, key=lambda g: -(g.memory_total or 0))
    return order, [g.nvml_index for g in order] != [g.nvml_index for g in gpus]


def gpu_map(report: NvmlReport, visible_ids: list[str], device_order: str | None
            ) -> tuple[list[dict[str, object]], list[str]]:
    """One row per id in the worker's CUDA_VISIBLE_DEVICES (ids are CUDA indices or UUIDs)."""
    warnings: list[str] = []
    cuda, differs = cuda_order(report.gpus, device_order)
    if differs and any(i.isdigit() for i in visible_ids):
        warnings.append("CUDA_DEVICE_ORDER is not PCI_BUS_ID and the GPUs differ: CUDA index k is "
                        "NOT nvidia-smi index k (set CUDA_DEVICE_ORDER=PCI_BUS_ID in env_vars)")
    by_uuid = {g.uuid: g for g in report.gpus}
    mig_by_uuid = {m.uuid: (g, m) for g in report.gpus for m in g.mig}
    rows: list[dict[str, object]] = []
    for logical, ident in enumerate(visible_ids):
        row: dict[str, object] = {"ray_logical_id": logical, "visible_id": ident}
        gpu: Gpu | None = None
        if ident.isdigit():
            k = int(ident)
            gpu = cuda[k] if k < len(cuda) else None
            row["cuda_index"] = k
        elif ident in by_uuid:
            gpu = by_uuid[ident]
            row["cuda_index"] = cuda.index(gpu)
        elif ident in mig_by_uuid:
            gpu, m = mig_by_uuid[ident]
            row["mig_instance"] = m.to_dict()
        if gpu is None:
            warnings.append(f"visible id {ident!r} matches no GPU NVML reports")
        else:
            row.update(gpu.to_dict())
            if gpu.mig_enabled and "mig_instance" not in row:
                warnings.append(f"GPU {gpu.nvml_index} has MIG on: CUDA sees none of its MIG "
                                "instances unless they are listed by MIG-UUID")
        rows.append(row)
    return rows, warnings

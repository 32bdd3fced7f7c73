"""Ray 2.60.0's accelerator families as data (from `ray/_private/accelerators/*.py`).

Each family: the Ray resource it serves, the visible-ids variable Ray writes in the worker at task
start, the `RAY_EXPERIMENTAL_NOSET_*` switch that disables the write, how ids are formatted and
which request quantities Ray accepts.
"""

from __future__ import annotations

from dataclasses import dataclass

# How a family validates a request quantity (`validate_resource_request_quantity`).
FRACTION_GPU = "gpu"        # < 1 allowed, > 1 must be whole
FRACTION_ANY = "any"        # any fraction (NPU)
FRACTION_WHOLE = "whole"    # whole numbers only
FRACTION_TPU = "tpu"        # one of TPU_VALID_CHIP_OPTIONS


@dataclass(frozen=True)
class Family:
    key: str                      # rtenv's name for the family
    resource: str                 # Ray resource name
    env_var: str | None           # variable Ray writes (None: Apple, nothing to write)
    noset: str | None             # switch that disables the write
    fraction: str
    prefix: str = ""              # FuriosaAI writes `npu:<id>`
    noset_truthy: bool = False    # MetaX checks `os.environ.get(...)` (any non-empty value)
    label: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"family": self.key, "resource": self.resource, "env_var": self.env_var,
                "noset": self.noset, "fraction": self.fraction, "prefix": self.prefix}


_N = "RAY_EXPERIMENTAL_NOSET_"
GPU_VENDORS: dict[str, Family] = {
    "nvidia": Family("nvidia", "GPU", "CUDA_VISIBLE_DEVICES", _N + "CUDA_VISIBLE_DEVICES",
                     FRACTION_GPU, label="NVIDIA GPU"),
    "amd": Family("amd", "GPU", "HIP_VISIBLE_DEVICES", _N + "HIP_VISIBLE_DEVICES",
                  FRACTION_GPU, label="AMD GPU"),
    "intel": Family("intel", "GPU", "ZE_AFFINITY_MASK", _N + "ZE_AFFINITY_MASK",
                    FRACTION_GPU, label="Intel GPU"),
    "metax": Family("metax", "GPU", "CUDA_VISIBLE_DEVICES", _N + "CUDA_VISIBLE_DEVICES",
                    FRACTION_GPU, noset_truthy=True, label="MetaX GPU"),
    "apple": Family("apple", "GPU", None, None, FRACTION_GPU, label="Apple GPU"),
}

OTHER_FAMILIES: dict[str, Family] = {
    "neuron_cores": Family("neuron", "neuron_cores", "NEURON_RT_VISIBLE_CORES",
                           _N + "NEURON_RT_VISIBLE_CORES", FRACTION_WHOLE, label="AWS Neuron"),
    "TPU": Family("tpu", "TPU", "TPU_VISIBLE_CHIPS", _N + "TPU_VISIBLE_CHIPS", FRACTION_TPU,
                  label="Google TPU"),
    "HPU": Family("hpu", "HPU", "HABANA_VISIBLE_MODULES", _N + "HABANA_VISIBLE_MODULES",
                  FRACTION_WHOLE, label="Intel Gaudi"),
    "NPU": Family("npu", "NPU", "ASCEND_RT_VISIBLE_DEVICES", _N + "ASCEND_RT_VISIBLE_DEVICES",
                  FRACTION_ANY, label="Huawei Ascend"),
    # the switch's name differs from the variable: Ray's own naming
    "RBLN": Family("rbln", "RBLN", "RBLN_DEVICES", _N + "RBLN_RT_VISIBLE_DEVICES",
                   FRACTION_WHOLE, label="Rebellions"),
    "TTNPU": Family("ttnpu", "TTNPU", "TT_VISIBLE_DEVICES", _N + "TENSTORRENT_VISIBLE_DEVICES",
                    FRACTION_WHOLE, label="Tenstorrent"),
    "FURIOSA": Family("furiosa", "FURIOSA", "FURIOSA_DEVICES", _N + "FURIOSA_DEVICES",
                      FRACTION_WHOLE, prefix="npu:", label="FuriosaAI"),
    "MBLT": Family("mblt", "MBLT", "QBRUNTIME_VISIBLE_DEVICES", _N + "MBLT_RT_VISIBLE_DEVICES",
                   FRACTION_WHOLE, label="Mobilint"),
}

TPU_VALID_CHIP_OPTIONS = (1, 2, 4, 8)
TPU_CHIPS_PER_HOST_BOUNDS = "TPU_CHIPS_PER_HOST_BOUNDS"
TPU_HOST_BOUNDS = "TPU_HOST_BOUNDS"
TPU_BOUNDS_1_CHIP = "1,1,1"
TPU_BOUNDS_2_CHIP = "1,2,1"
TPU_SINGLE_HOST_BOUNDS = "1,1,1"
TPU_RESOURCE_PER_CHIP = "RAY_TPU_RESOURCE_PER_CHIP"
OVERRIDE_ON_ZERO = "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"


def families(gpu_vendor: str = "nvidia") -> list[Family]:
    """Every family a worker on a node with this GPU vendor has, in Ray's resource order."""
    return [GPU_VENDORS[gpu_vendor], *OTHER_FAMILIES.values()]


def family_for(resource: str, gpu_vendor: str = "nvidia") -> Family | None:
    if resource == "GPU":
        return GPU_VENDORS[gpu_vendor]
    return OTHER_FAMILIES.get(resource)


def env_bool(env: dict[str, str], key: str) -> bool:
    """Ray's `env_bool`: "1" or "true" (any case)."""
    return env.get(key, "").lower() in ("1", "true") if key in env else False


def noset_active(fam: Family, env: dict[str, str]) -> bool:
    if fam.noset is None:
        return False
    if fam.noset_truthy:
        return bool(env.get(fam.noset))
    return env_bool(env, fam.noset)


def parse_visible(fam: Family, value: str | None) -> list[str] | None:
    """The worker's snapshot of a preset visible list (`get_current_process_visible_...`)."""
    if value is None:
        return None
    if value == "" or (fam.key == "nvidia" and value == "NoDevFiles"):
        return []
    items = value.split(",")
    if fam.prefix:
        items = [t.strip().removeprefix(fam.prefix) for t in items if t.strip()]
    return items


def validate_quantity(fam: Family, quantity: float) -> str | None:
    """Ray's rejection message for a request quantity, or None when Ray accepts it."""
    if fam.fraction == FRACTION_GPU and quantity > 1 and not float(quantity).is_integer():
        return (f"GPU resource quantities >1 must be whole numbers. The specified quantity "
                f"{quantity} is invalid")
    if fam.fraction == FRACTION_WHOLE and not float(quantity).is_integer():
        return (f"{fam.resource} resource quantity must be whole numbers. The specified "
                f"quantity {quantity} is invalid")
    if fam.fraction == FRACTION_TPU and quantity not in TPU_VALID_CHIP_OPTIONS:
        return (f"The number of requested 'TPU' was set to {quantity} which is not a supported "
                f"chip configuration. Supported configs: {list(TPU_VALID_CHIP_OPTIONS)}")
    return None

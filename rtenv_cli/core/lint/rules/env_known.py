"""Well-known environment variable names (data for RTE136/RTE137/RTE138). Ray's own `RAY_*`
names are generated: ray_env_names.json (scripts/gen_ray_env_names.py)."""

from __future__ import annotations

from dataclasses import dataclass

# variables that hold a search path: a value without the node's own (`$PATH`) replaces it
# (PYTHONPATH is RTE132's: Ray prepends working_dir and py_modules to it)
PATH_VARS = {
    "PATH": "programs the image installs (python, ray, pip, nvidia-smi) are no longer found",
    "LD_LIBRARY_PATH": "libraries the image adds there (CUDA, cuDNN, NCCL under "
                       "/usr/local/nvidia/lib64 or /usr/local/cuda/lib64) are no longer found",
}

NCCL = frozenset({
    "NCCL_ALGO", "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_BUFFSIZE",
    "NCCL_CGA_CLUSTER_SIZE", "NCCL_CHECKS_DISABLE", "NCCL_CHECK_POINTERS", "NCCL_COLLNET_ENABLE",
    "NCCL_COMM_ID", "NCCL_CONF_FILE", "NCCL_CROSS_NIC", "NCCL_CUMEM_ENABLE", "NCCL_DEBUG",
    "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_DMABUF_ENABLE", "NCCL_GRAPH_REGISTER",
    "NCCL_HOSTID", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_AR_THRESHOLD", "NCCL_IB_CUDA_SUPPORT", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX",
    "NCCL_IB_HCA", "NCCL_IB_MERGE_NICS", "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_RETRY_CNT", "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_SL", "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_TC", "NCCL_IB_TIMEOUT",
    "NCCL_IB_USE_INLINE", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_LAUNCH_MODE", "NCCL_LL_THRESHOLD",
    "NCCL_LOCAL_REGISTER", "NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS",
    "NCCL_MIN_NCHANNELS", "NCCL_MNNVL_ENABLE", "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_NET",
    "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ", "NCCL_NET_PLUGIN", "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NSOCKS_PERTHREAD", "NCCL_NTHREADS", "NCCL_NVB_DISABLE", "NCCL_NVLS_ENABLE",
    "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_P2P_NET_CHUNKSIZE", "NCCL_P2P_PXN_LEVEL",
    "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_PROFILER_PLUGIN", "NCCL_PROTO", "NCCL_PXN_DISABLE",
    "NCCL_RAS_ADDR", "NCCL_RAS_ENABLE", "NCCL_RUNTIME_CONNECT", "NCCL_SET_THREAD_NAME",
    "NCCL_SHM_DISABLE", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS",
    "NCCL_TOPO_DUMP_FILE", "NCCL_TOPO_FILE", "NCCL_TREE_THRESHOLD", "NCCL_TUNER_PLUGIN",
    "NCCL_WORK_FIFO_DEPTH", "NCCL_BFLOAT16",
})
CUDA = frozenset({
    "CUDA_AUTO_BOOST", "CUDA_CACHE_DISABLE", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_PATH",
    "CUDA_COREDUMP_FILE", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_DEVICE_ORDER",
    "CUDA_DEVICE_WAITS_ON_EXCEPTION", "CUDA_DISABLE_PTX_JIT", "CUDA_ENABLE_COREDUMP_ON_EXCEPTION",
    "CUDA_FORCE_PTX_JIT", "CUDA_HOME", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_DATA_LOADING",
    "CUDA_MODULE_LOADING", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_LOG_DIRECTORY",
    "CUDA_MPS_PIPE_DIRECTORY", "CUDA_PATH", "CUDA_ROOT", "CUDA_SCALE_LAUNCH_QUEUES",
    "CUDA_VERSION", "CUDA_VISIBLE_DEVICES",
})
HUGGING_FACE = frozenset({
    "HF_ALLOW_CODE_EVAL", "HF_ASSETS_CACHE", "HF_DATASETS_CACHE", "HF_DATASETS_OFFLINE",
    "HF_DATASETS_TRUST_REMOTE_CODE", "HF_DEBUG", "HF_ENDPOINT", "HF_EVALUATE_OFFLINE",
    "HF_HOME", "HF_HUB_CACHE", "HF_HUB_DISABLE_EXPERIMENTAL_WARNING",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN", "HF_HUB_DISABLE_PROGRESS_BARS",
    "HF_HUB_DISABLE_SYMLINKS_WARNING", "HF_HUB_DISABLE_TELEMETRY", "HF_HUB_DISABLE_XET",
    "HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_ENABLE_HF_TRANSFER", "HF_HUB_ETAG_TIMEOUT",
    "HF_HUB_OFFLINE", "HF_HUB_VERBOSITY", "HF_MODULES_CACHE", "HF_TOKEN", "HF_TOKEN_PATH",
    "HF_XET_CACHE", "HF_XET_HIGH_PERFORMANCE",
    "TRANSFORMERS_CACHE", "TRANSFORMERS_NO_ADVISORY_WARNINGS", "TRANSFORMERS_OFFLINE",
    "TRANSFORMERS_VERBOSITY",
})
WANDB = frozenset({
    "WANDB_ANONYMOUS", "WANDB_API_KEY", "WANDB_ARTIFACT_DIR", "WANDB_BASE_URL", "WANDB_CACHE_DIR",
    "WANDB_CONFIG_DIR", "WANDB_CONFIG_PATHS", "WANDB_CONSOLE", "WANDB_DATA_DIR",
    "WANDB_DIR", "WANDB_DISABLED", "WANDB_DISABLE_CODE", "WANDB_DISABLE_GIT", "WANDB_DOCKER",
    "WANDB_ENTITY", "WANDB_ERROR_REPORTING", "WANDB_GROUP_NAME", "WANDB_HOST",
    "WANDB_HTTP_TIMEOUT", "WANDB_IGNORE_GLOBS", "WANDB_INIT_TIMEOUT", "WANDB_JOB_TYPE",
    "WANDB_LOG_MODEL", "WANDB_MODE", "WANDB_NAME", "WANDB_NOTEBOOK_NAME", "WANDB_NOTES",
    "WANDB_POPULATE_RUN_LOCATION_HOOK", "WANDB_PROCESS_RUN_INFO_HOOK", "WANDB_PROJECT",
    "WANDB_PROJECT_NAME", "WANDB_QUIET", "WANDB_RESUME", "WANDB_RUN_GROUP", "WANDB_RUN_ID",
    "WANDB_SETUP_API_KEY_HOOK", "WANDB_SHOW_RUN", "WANDB_SILENT", "WANDB_START_METHOD",
    "WANDB_SWEEP_ID", "WANDB_TAGS", "WANDB_USERNAME", "WANDB_USER_EMAIL", "WANDB_WATCH",
})
FAMILIES = ("RAY_", "NCCL_", "CUDA_", "HF_", "TRANSFORMERS_", "WANDB_")


@dataclass(frozen=True)
class DriverOnly:
    """A Ray setting read by some other process than the workers a runtime_env starts."""

    reader: str  # who reads it, and where in Ray 2.60.0's source
    instead: str  # where to set it


_NODE = DriverOnly(
    "the raylet's memory monitor, from the environment of `ray start` on each node "
    "(RayConfig, src/ray/common/ray_config_def.h)",
    "set it where `ray start` runs on every node (KubeRay: the head and worker containers' "
    "env)")
_DASHBOARD = DriverOnly(
    "the dashboard on the head, at `ray start --head` "
    "(ray/dashboard/modules/metrics/metrics_head.py)",
    "set it in the head's environment before `ray start --head`")
DRIVER_ONLY = {
    "RAY_ADDRESS": DriverOnly(
        "`ray job submit` and ray.init in the driver; for a job's driver Ray sets it itself "
        "(ray/dashboard/modules/job/job_supervisor.py, _get_driver_env_vars), workers never "
        "read it", "pass --address (or set RAY_ADDRESS) where you submit"),
    "RAY_RUNTIME_ENV_IGNORE_GITIGNORE": DriverOnly(
        "the process that packages working_dir/py_modules, before anything reaches a worker "
        "(ray/dashboard/modules/dashboard_sdk.py, ray/_private/worker.py)",
        "set it in the shell that runs `ray job submit` or the driver (`rtenv push` reads it "
        "there too)"),
    "RAY_memory_usage_threshold": _NODE,
    "RAY_memory_monitor_refresh_ms": _NODE,
    "RAY_GRAFANA_HOST": _DASHBOARD,
    "RAY_GRAFANA_IFRAME_HOST": _DASHBOARD,
    "RAY_PROMETHEUS_NAME": _DASHBOARD,
}
# RAY_RUNTIME_ENV_<PLUGIN>_CACHE_SIZE_GB: the node's runtime_env agent, at its start
# (ray/_private/runtime_env/plugin.py)
CACHE_SIZE = DriverOnly(
    "the node's runtime_env agent when it starts (ray/_private/runtime_env/plugin.py)",
    "set it on every node before `ray start`")

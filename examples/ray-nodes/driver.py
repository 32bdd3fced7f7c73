"""A job whose tasks get their packages from rtenv's runtime_env plugin on each node. Run it from
the repository root with RAY_ADDRESS set, on a cluster started after `eval "$(rtenv ray-env)"`:

    python examples/ray-nodes/driver.py pushed.yaml
"""

import os
import sys
from pathlib import Path

import ray
import yaml


@ray.remote
def inside() -> dict[str, object]:
    import six

    venv = os.environ.get("VIRTUAL_ENV", "")
    return {"six": six.__version__, "ray": ray.__version__,
            "venv python": bool(venv) and sys.executable.startswith(venv),
            "GREETING": os.environ.get("GREETING")}


def main() -> None:
    runtime_env = yaml.safe_load(Path(sys.argv[1]).read_text())
    ray.init(runtime_env=runtime_env, log_to_driver=False, logging_level="ERROR")
    seen = ray.get(inside.remote())
    print(f"runtime_env: {runtime_env['rtenv']}")
    for key, value in seen.items():
        print(f"  {key}: {value}")
    print("same ray as the driver:", seen["ray"] == ray.__version__)


if __name__ == "__main__":
    main()

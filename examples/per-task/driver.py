"""A driver with a job-level runtime_env and one task that brings its own; prints what each task
saw. Run it from the repository root with RAY_ADDRESS set:

    python examples/per-task/driver.py
"""

import os
from pathlib import Path

import ray
import yaml

HERE = Path(__file__).resolve().parent
NAMES = ("DATA_DIR", "LOG_LEVEL", "OUT")


@ray.remote
def read_env() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in NAMES}


def main() -> None:
    job_env = yaml.safe_load((HERE / "job_env.yaml").read_text())
    task_env = yaml.safe_load((HERE / "task_env.yaml").read_text())
    ray.init(runtime_env=job_env, log_to_driver=False, logging_level="ERROR")
    print("job default:", ray.get(read_env.remote()))
    print("task's own: ", ray.get(read_env.options(runtime_env=task_env).remote()))


if __name__ == "__main__":
    main()

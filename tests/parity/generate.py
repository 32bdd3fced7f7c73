"""Random runtime_env documents for differential testing against Ray (seeded, reproducible).

Values are drawn per field from pools of valid, borderline and wrong values, so that most
documents exercise several of Ray's checks at once.
"""

from __future__ import annotations

import json
import random
from typing import Any

import yaml

SCALARS: list[Any] = [None, True, False, 0, 1, -1, 2.5, "", "x", "proj", "a.log", [], {}, "yes",
                      2**31, float("nan")]
POOLS: dict[str, list[Any]] = {
    "working_dir": ["proj", "./proj/", "nope", "", "arch.zip", "s3://b/x.zip", "s3://b/x",
                    "gcs://_ray_pkg_a.zip", "local:///opt", "local://rel", 5, None, ["proj"],
                    "arch.tgz", "notes.txt", "ftp://h/x.zip", "pip://x", "proj2"],
    "py_modules": [["proj2/lib"], ["mod.py"], ["pkg-1.0-py3-none-any.whl"], [], None, "proj",
                   [1], ["s3://b/x.whl"], ["arch.zip"], ["proj2/lib", "s3://b/y.zip"],
                   ["missing.py"], ["missing-1.0-py3-none-any.whl"], ["local://x"], [None]],
    "excludes": [["*.txt"], [], None, "*.log", 5, [1], ["*"], ["/sub/"], [0], [None, "*.txt"],
                 {"*.txt": 1}, "", 0, True],
    "pip": [["a"], ["a", "a"], [], "reqs.txt", "missing.txt", {"packages": ["a"]},
            {"packages": []}, {"packages": ["a"], "pip_check": True}, {"pip_check": True},
            {"packages": "reqs.txt"}, {"packages": [1]}, {"packages": ["a"], "x": 1}, 5, None],
    "uv": [["a"], [], "reqs.txt", {"packages": ["a"]}, {"packages": "x"}, {"packages": [1]},
           {"packages": ["a"], "uv_version": 1}, 5, None],
    "conda": ["env", "env.yaml", "empty.yaml", "list.yaml", "missing.yml", {"dependencies": []},
              5, None, "", "bad.yaml", "/nonexistent/env", "env.YML", []],
    "env_vars": [{"A": "1"}, {}, [], "", 0, True, {"A": 1}, {"A": None}, {"A": "$B", "B": "x"},
                 None, {"CUDA_VISIBLE_DEVICES": "0"}, {"A": 1.5}, {1: "a"}, {"A": ["b"]}],
    "config": [{}, {"setup_timeout_seconds": 60}, {"setup_timeout_seconds": 0},
               {"setup_timeout_seconds": True}, {"setup_timeout_seconds": 2**31},
               {"eager_install": "no"}, {"log_files": ["a"]}, {"log_files": "a"}, [], None,
               {"setup_timeout": 1}],
    "container": [{"image": "x"}, {}, "x", None],
    "image_uri": ["x", "", 5, None],
    "nsight": ["default", {"t": "cuda"}, None],
    "_nsight": ["default", None],
    "worker_process_setup_hook": ["m.f", 42, 0, "", None, ["a"]],
    "py_executable": ["python3", 3],
    "java_jars": [["s3://b/x.jar"]],
    "_ray_commit": ["abc"],
    "_validate": [False, True, 0],
    "my_plugin": SCALARS,
    "self": [1],
}


def random_env(rng: random.Random) -> dict[str, Any]:
    fields = rng.sample(sorted(POOLS), k=rng.randint(1, 5))
    env = {}
    for name in fields:
        if name == "self" and rng.random() < 0.8:  # keep the rare shape error rare
            continue
        env[name] = rng.choice(POOLS[name])
    return env


def dump(env: dict[str, Any], rng: random.Random) -> tuple[str, str]:
    """(extension, text): JSON (where encodable) or YAML."""
    if rng.random() < 0.3:
        try:
            return "json", json.dumps(env, allow_nan=False)
        except ValueError:
            pass
    return "yaml", yaml.safe_dump(env, default_flow_style=rng.random() < 0.5)


def documents(seed: int, count: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)  # noqa: S311 - reproducible test data, not cryptography
    return [dump(random_env(rng), rng) for _ in range(count)]

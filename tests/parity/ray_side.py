"""Ray 2.60.0's own code on every corpus file, in one process (no cluster needed).

Usage: `python -m tests.parity.ray_side CASE_FILE...` with the corpus root as the CWD (Ray
resolves relative paths against the CWD). Prints one JSON object: {file: {api: result}} where
result is {"valid": bool, "stage": str | None, "error": "Type: message" | None,
"normalized": <JSON text of the dict sent, sort_keys> | None}.

job-submit follows `JobSubmissionClient.submit_job` (with the HTTP upload replaced by reading
the package bytes, so missing files still fail), then the job server's `RuntimeEnv(**body)` and
the protobuf config it builds, then the driver's setup-hook step. ray-init follows
`ray.init` -> `worker.connect` with GCS uploads stubbed.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any


def _err(stage: str, exc: BaseException) -> dict[str, Any]:
    return {"valid": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}",
            "normalized": None}


def _ok(normalized: dict[str, Any], *, allow_nan: bool) -> dict[str, Any]:
    return {"valid": True, "stage": None, "error": None,
            "normalized": json.dumps(normalized, sort_keys=True, allow_nan=allow_nan)}


def _config_proto(env: Any) -> None:
    from ray._private.utils import get_runtime_env_info

    get_runtime_env_info(env, is_job_runtime_env=True, serialize=False)


def job_submit(path: str) -> dict[str, Any]:
    from ray.dashboard.modules.dashboard_sdk import parse_runtime_env_args
    from ray.dashboard.modules.job.sdk import JobSubmissionClient
    from ray.runtime_env import RuntimeEnv
    from ray.runtime_env.runtime_env import _validate_no_local_paths

    try:
        loaded = parse_runtime_env_args(runtime_env=path)
    except Exception as exc:  # the verdict is "any exception"
        return _err("parse", exc)
    client = object.__new__(JobSubmissionClient)
    client._package_exists = lambda uri: False  # type: ignore[method-assign]

    def upload(  # noqa: PLR0917 - the signature of the method it replaces
        package_uri: str, package_path: str, include_gitignore: bool,
               include_parent_dir: bool = False, excludes: Any = None,
               is_file: bool = False) -> None:
        if is_file:
            Path(package_path).read_bytes()  # the real upload reads the file: missing -> error

    client._upload_package = upload  # type: ignore[method-assign]
    stage = "client"
    try:
        runtime_env = copy.deepcopy(loaded or {})
        client._upload_working_dir_if_needed(runtime_env)
        client._upload_py_modules_if_needed(runtime_env)
        hook = runtime_env.get("worker_process_setup_hook")
        if hook and not isinstance(hook, str):
            raise ValueError(f"Invalid type {type(hook)} for `worker_process_setup_hook`.")
        env = RuntimeEnv(**runtime_env)
        _validate_no_local_paths(env)
        sent = env.to_dict()
        body = json.dumps(sent, allow_nan=False)  # requests' JSON body
        stage = "server"
        received = json.loads(body)
        server_env = RuntimeEnv(**received)
        _validate_no_local_paths(server_env)
        _config_proto(server_env)
        stage = "driver"
        from ray._private.runtime_env.setup_hook import (
            upload_worker_process_setup_hook_if_needed,
        )

        upload_worker_process_setup_hook_if_needed(copy.deepcopy(received), None)
    except Exception as exc:  # the verdict is "any exception"
        return _err(stage, exc)
    return _ok(received, allow_nan=False)


@contextlib.contextmanager
def _stub_gcs_uploads():
    from ray._private.runtime_env import py_modules, working_dir

    saved = {}
    stubs = {"upload_package_if_needed": lambda *a, **k: True,
             "upload_package_to_gcs": lambda *a, **k: None,
             "package_exists": lambda *a, **k: False}
    for module in (py_modules, working_dir):
        for name, stub in stubs.items():
            if hasattr(module, name):
                saved[(module, name)] = getattr(module, name)
                setattr(module, name, stub)
    try:
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)


def ray_init(path: str, scratch: str) -> dict[str, Any]:
    import yaml
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed
    from ray._private.runtime_env.setup_hook import upload_worker_process_setup_hook_if_needed
    from ray._private.runtime_env.working_dir import upload_working_dir_if_needed
    from ray.runtime_env import RuntimeEnv
    from ray.runtime_env.runtime_env import _validate_no_local_paths

    try:
        with open(path) as f:
            runtime_env = yaml.safe_load(f)
    except Exception as exc:  # the verdict is "any exception"
        return _err("parse", exc)
    if not runtime_env:  # ray.init: `if runtime_env:`
        return _ok({}, allow_nan=True)
    try:
        with _stub_gcs_uploads():
            runtime_env = upload_py_modules_if_needed(runtime_env, True, scratch_dir=scratch)
            runtime_env = upload_working_dir_if_needed(runtime_env, True, scratch_dir=scratch)
        runtime_env = upload_worker_process_setup_hook_if_needed(runtime_env, None)
        runtime_env.pop("excludes", None)
        env = RuntimeEnv(**runtime_env)
        _validate_no_local_paths(env)
        _config_proto(env)
        serialized = env.serialize()
    except Exception as exc:  # the verdict is "any exception"
        return _err("client", exc)
    return _ok(json.loads(serialized), allow_nan=True)


def main(files: list[str]) -> None:
    logging.disable(logging.CRITICAL)
    os.environ.pop("RAY_RUNTIME_ENV_LOCAL_DEV_MODE", None)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for file in files:
            results[file] = {"job-submit": job_submit(file), "ray-init": ray_init(file, scratch)}
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])

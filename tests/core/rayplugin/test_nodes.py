"""One probe of rtenv's plugin on a node: the node scan's facts (cache/ray_scan.py, run here as
the node task runs it) and one verdict on them (rayplugin/nodes.judge), so `rtenv ray-env
--check` and `rtenv doctor --address` say the same of the same node."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.cache import ray_scan
from rtenv_cli.core.doctor.model import Status
from rtenv_cli.core.doctor.plugin import RAY_ENV_FIX
from rtenv_cli.core.doctor.plugin import plugin_status as doctor_plugin
from rtenv_cli.core.paths import HOME_ENV
from rtenv_cli.core.rayplugin import schema
from rtenv_cli.core.rayplugin.nodes import node_status
from tests.support.cli import run_process
from tests.support.ray_head import RayHead

OURS = json.dumps([{"class": schema.PLUGIN_CLASS, "priority": schema.PRIORITY}])
NOT_OURS = json.dumps([{"class": "other_pkg.Plugin"}])
BROKEN = json.dumps([{"class": "rtenv_cli.no_such_module.RtenvPlugin"}])
# doctor status, ray-env `loaded`, for a node started with each setting
CASES = {"unset": (None, Status.WARN, False), "ours": (OURS, Status.OK, True),
         "another plugin": (NOT_OURS, Status.WARN, False),
         "not JSON": ("[{", Status.WARN, False)}


def _node(setting: str | None, tmp_path: Path, env_from: str = "raylet") -> dict[str, Any]:
    env = {schema.CACHE_SIZE_ENV: "0", HOME_ENV: str(tmp_path)}
    if setting is not None:
        env[schema.PLUGINS_ENV] = setting
    return {"node_id": "ab" * 28, "node_ip": "10.0.0.7",
            "facts": ray_scan.node_facts(str(tmp_path), env, env_from)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_ray_env_check_and_doctor_judge_the_same_facts_alike(case: str, tmp_path: Path) -> None:
    setting, doctor_status, loaded = CASES[case]
    node = _node(setting, tmp_path)
    check, status = doctor_plugin(node), node_status(node)
    assert (check.status, status["loaded"]) == (doctor_status, loaded)
    if loaded:
        assert check.detail.startswith(f"loaded: {schema.PLUGIN_CLASS}")
        assert status["reason"] is None
    else:
        assert check.detail == f"not loaded: {status['reason']}"
        assert check.fix == RAY_ENV_FIX
        assert status["reason"].endswith("in the raylet's environment (its runtime-env agent's)")
    assert status["source"] == "raylet"
    assert status["cache_size_gb"] == "0"
    assert status["rtenv_home"] == str(tmp_path)
    assert status["plugins"] == setting


def test_a_listed_class_that_does_not_import_fails_both(tmp_path: Path) -> None:
    node = _node(BROKEN, tmp_path)
    assert node["facts"]["plugins"][0]["importable"] is False  # the node task tried it
    assert "ModuleNotFoundError" in node["facts"]["plugins"][0]["error"]
    # rtenv's own class listed on a node whose Python lacks rtenv (as the task reports it)
    node["facts"]["plugins"] = [{"class": schema.PLUGIN_CLASS, "importable": False,
                                 "error": "ModuleNotFoundError: No module named 'rtenv_cli'"}]
    check, status = doctor_plugin(node), node_status(node)
    assert (check.status, status["loaded"], status["importable"]) == (Status.FAIL, False, False)
    assert check.detail == status["reason"]
    assert "cannot import it (ModuleNotFoundError" in status["reason"]


def test_a_node_that_failed_its_scan_is_missing_with_its_error() -> None:
    status = node_status({"node_id": "cd" * 28, "node_ip": "10.0.0.8",
                          "error": "RuntimeError: the raylet died", "sessions": []})
    assert (status["loaded"], status["state"]) == (False, "unknown")
    assert status["reason"] == "the node scan failed: RuntimeError: the raylet died"


def test_the_node_script_stands_alone_and_reads_the_names_rtenv_ray_env_sets() -> None:
    """The node script is sent as source (rtenv may not be installed on the node): it imports
    only the standard library at its top, and its copies of the variable names are rtenv's."""
    source = Path(ray_scan.__file__).read_text(encoding="utf-8")
    top = {alias.name.split(".")[0] for node in ast.parse(source).body
           if isinstance(node, ast.Import) for alias in node.names}
    top |= {node.module.split(".")[0] for node in ast.parse(source).body
            if isinstance(node, ast.ImportFrom) and node.module}
    assert top <= sys.stdlib_module_names, top - sys.stdlib_module_names
    assert ray_scan.PLUGINS_VAR == schema.PLUGINS_ENV
    assert f'"{schema.CACHE_SIZE_ENV}"' in source
    assert f'"{HOME_ENV}"' in source


@pytest.mark.ray
@pytest.mark.slow
def test_ray_env_check_and_doctor_report_one_head_alike(ray_cluster: RayHead) -> None:
    """A head started without the plugin: `ray-env --check` exits 1 naming the reason the
    doctor's plugin check gives, for the same node, read from the same probe."""
    env = {k: v for k, v in ray_cluster.client_env().items() if k != "RAY_ADDRESS"}
    check = run_process(["ray-env", "--check", ray_cluster.address, "--format", "json"],
                        env=env, timeout=300)
    assert check.exit_code == 1, check.stdout + check.stderr
    (node,) = check.json["nodes"]
    assert check.json["missing"] == [node["node_id"]]
    assert (node["loaded"], node["source"]) == (False, "raylet")
    text = run_process(["ray-env", "--check", ray_cluster.address], env=env, timeout=300)
    assert text.exit_code == 1
    assert text.stdout.splitlines() == [
        f"{node['node_id'][:12]}  {node['node_ip']}  MISSING ({node['reason']})"]
    doctor = run_process(["doctor", "--address", ray_cluster.address, "--format", "json"],
                         env=env, timeout=300)
    plugin = {c["name"]: c for c in doctor.json["checks"]}[f"node {node['node_id'][:8]} plugin"]
    assert plugin["detail"] == f"not loaded: {node['reason']}"

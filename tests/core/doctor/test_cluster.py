"""The doctor's checks of an address: node reports judged (plugin, versions, disk), a real rtenv
agent with and without its token, a shared directory, and real Ray heads (auth off and on, and
one started with a plugin setting in its environment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtenv_cli.core.doctor.cluster import check_address, node_checks
from rtenv_cli.core.doctor.model import Status
from rtenv_cli.core.doctor.plugin import RAY_ENV_FIX, plugin_status
from rtenv_cli.core.spec.model import RAY_VERSION
from tests.support.agent import agent_process
from tests.support.cli import run_process
from tests.support.ray_head import RayHead, ray_head

GiB = 2**30


def _node(**facts: Any) -> dict[str, Any]:
    base = {"ray_version": RAY_VERSION, "python": "3.11.7", "plugins_env": None,
            "plugins_env_from": "raylet", "plugins": [], "rtenv_version": None,
            "disk": {"path": "/tmp/ray", "total_bytes": 100 * GiB, "free_bytes": 50 * GiB}}
    base.update(facts)
    return {"node_id": "ab" * 28, "node_ip": "10.0.0.7", "sessions": [], "facts": base}


def test_plugin_not_configured_is_a_warning_with_the_ray_env_fix() -> None:
    check = plugin_status(_node())
    assert check.status is Status.WARN
    assert check.detail == ("not loaded: RAY_RUNTIME_ENV_PLUGINS is not set in the raylet's "
                            "environment (its runtime-env agent's)")
    assert check.fix == 'run `eval "$(rtenv ray-env)"` before `ray start` on the node'
    assert check.fix == RAY_ENV_FIX


def test_another_plugin_is_not_rtenvs() -> None:
    setting = json.dumps([{"class": "other_pkg.Plugin"}])
    check = plugin_status(_node(plugins_env=setting, plugins=[
        {"class": "other_pkg.Plugin", "importable": True, "error": None}]))
    assert check.status is Status.WARN
    assert f"RAY_RUNTIME_ENV_PLUGINS={setting}" in check.detail


def test_rtenv_plugin_configured_and_importable_is_loaded() -> None:
    cls = "rtenv_cli.ray_plugin.RtenvPlugin"
    check = plugin_status(_node(plugins_env=json.dumps([{"class": cls}]), rtenv_version="0.1.0",
                                plugins=[{"class": cls, "importable": True, "error": None}]))
    assert check.status is Status.OK
    assert check.detail == f"loaded: {cls} (rtenv 0.1.0)"


def test_rtenv_plugin_that_does_not_import_fails() -> None:
    cls = "rtenv_cli.ray_plugin.RtenvPlugin"
    check = plugin_status(_node(plugins=[{"class": cls, "importable": False,
                                          "error": "ModuleNotFoundError: No module named "
                                          "'rtenv_cli'"}]))
    assert check.status is Status.FAIL
    assert "cannot import it (ModuleNotFoundError" in check.detail
    assert (check.fix or "").startswith("pip install rtenv into the Python that runs `ray start`")


def test_node_versions_other_than_rtenvs_and_the_drivers_are_warned() -> None:
    checks = node_checks(_node(ray_version="2.54.0", python="3.9.18"))
    assert checks[0].name == f"node {'ab' * 4} ray"
    assert checks[0].status is Status.WARN
    assert f"rtenv reproduces Ray {RAY_VERSION}" in checks[0].detail
    assert "`ray.init` from here fails on a version mismatch" in checks[0].detail


def test_low_disk_with_old_sessions_points_at_cache_gc() -> None:
    node = _node(disk={"path": "/tmp/ray", "total_bytes": 100 * GiB, "free_bytes": GiB})
    node["sessions"] = [{"live": True, "size_bytes": 3 * GiB},
                        {"live": False, "size_bytes": 20 * GiB}]
    caches = node_checks(node)[-1]
    assert caches.status is Status.WARN
    assert caches.detail.startswith("caches: live session 3.0 GiB, old sessions 20.0 GiB; "
                                    "1.0 GiB free of 100.0 GiB at /tmp/ray")
    assert caches.fix == "rtenv cache gc --address <address> (old sessions' caches)"


def test_a_node_that_failed_its_scan_fails() -> None:
    (check,) = node_checks({"node_id": "cd" * 28, "node_ip": "10.0.0.8",
                            "error": "RuntimeError: the raylet died", "sessions": []})
    assert check.status is Status.FAIL
    assert "the scan failed: RuntimeError: the raylet died" in check.detail


def test_shared_directory(tmp_path: Path) -> None:
    (check,) = check_address(f"file://{tmp_path}")
    assert (check.name, check.status) == ("shared directory", Status.OK)
    (check,) = check_address(f"file://{tmp_path}/missing")
    assert check.status is Status.FAIL
    assert check.fix is not None
    assert check.fix.startswith(f"mkdir -p {tmp_path}/missing")


def test_rtenv_agent_with_and_without_its_token(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with agent_process(tmp_path / "store", token="s3cret-token") as agent:  # noqa: S106 - test token
        monkeypatch.delenv("RTENV_AGENT_TOKEN", raising=False)
        checks = {c.name: c for c in check_address(agent.url)}
        assert checks["auth"].status is Status.FAIL
        assert checks["auth"].fix == "export RTENV_AGENT_TOKEN=<the agent's token>"
        monkeypatch.setenv("RTENV_AGENT_TOKEN", "s3cret-token")
        checks = {c.name: c for c in check_address(agent.url)}
        assert checks["auth"].status is Status.OK
        assert checks["agent"].status is Status.OK
        assert f"store {tmp_path / 'store'}" in checks["agent"].detail


def test_unreachable_cluster_fails_with_the_fix() -> None:
    from tests.support.ports import free_port

    checks = check_address(f"127.0.0.1:{free_port()}")
    assert [(c.name, c.status) for c in checks] == [("cluster", Status.FAIL)]
    assert "`ray status`" in (checks[0].fix or "")


def _doctor(head: RayHead, address: str, env: dict[str, str] | None = None) -> Any:
    full = {k: v for k, v in head.client_env().items() if k != "RAY_ADDRESS"}
    full.update(env or {})
    return run_process(["doctor", "--address", address, "--format", "json"], env=full,
                       timeout=300)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("which", ["dashboard", "gcs"])
def test_live_head(ray_cluster: RayHead, which: str) -> None:
    address = ray_cluster.dashboard_url if which == "dashboard" else ray_cluster.address
    result = _doctor(ray_cluster, address)
    assert result.exit_code == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in result.json["checks"]}
    assert all(set(c) == {"name", "status", "detail", "fix"} for c in checks.values())
    assert checks["cluster"]["status"] == "ok"
    assert checks["auth"]["detail"] == "auth mode disabled; no token was found (none needed)"
    assert checks["nodes"]["detail"] == "1 alive node(s) answered"
    (node,) = {name.split()[1] for name in checks if name.startswith("node ")}
    assert checks[f"node {node} ray"]["detail"].endswith(f"Ray {RAY_VERSION}, Python "
                                                         f"{__import__('platform').python_version()}")
    plugin = checks[f"node {node} plugin"]
    assert plugin["status"] == "warn"
    assert plugin["detail"].startswith("not loaded: RAY_RUNTIME_ENV_PLUGINS is not set in the "
                                       "raylet's environment")
    assert plugin["fix"] == RAY_ENV_FIX
    caches = checks[f"node {node} caches"]
    assert caches["status"] == "ok"
    assert str(ray_cluster.temp_dir) in caches["detail"]


@pytest.mark.ray
@pytest.mark.slow
def test_token_cluster_without_and_with_the_token(ray_cluster_token: RayHead) -> None:
    assert ray_cluster_token.token is not None
    for address in (ray_cluster_token.dashboard_url, ray_cluster_token.address):
        refused = _doctor(ray_cluster_token, address, {"RAY_AUTH_TOKEN": ""})
        assert refused.exit_code == 1, refused.stdout
        auth = {c["name"]: c for c in refused.json["checks"]}["auth"]
        assert auth["status"] == "fail"
        assert auth["detail"] == "auth mode token; no token was found: every call is refused"
        assert auth["fix"].startswith("export RAY_AUTH_TOKEN=")
        wrong = _doctor(ray_cluster_token, address, {"RAY_AUTH_TOKEN": "not-the-token-0123456789"})
        assert {c["name"]: c for c in wrong.json["checks"]}["auth"]["status"] == "fail"
    accepted = _doctor(ray_cluster_token, ray_cluster_token.address)
    checks = {c["name"]: c for c in accepted.json["checks"]}
    assert checks["auth"]["detail"] == "auth mode token; a token was found and accepted"
    assert accepted.exit_code == 0, accepted.stdout


@pytest.mark.ray
@pytest.mark.slow
def test_plugin_setting_is_read_from_the_raylets_environment(tmp_path: Path) -> None:
    """A head started with a plugin of its own in RAY_RUNTIME_ENV_PLUGINS: the doctor reads the
    setting `ray start` had (not the scanning worker's) and says it is not rtenv's."""
    (tmp_path / "probe_plugin.py").write_text(
        "from ray._private.runtime_env.plugin import RuntimeEnvPlugin\n\n\n"
        "class ProbePlugin(RuntimeEnvPlugin):\n    name = 'rtenv_doctor_probe'\n")
    setting = json.dumps([{"class": "probe_plugin.ProbePlugin"}])
    with ray_head(env={"PYTHONPATH": str(tmp_path), "RAY_RUNTIME_ENV_PLUGINS": setting}) as head:
        result = _doctor(head, head.address)
    checks = {c["name"]: c for c in result.json["checks"]}
    (plugin,) = [c for name, c in checks.items() if name.endswith(" plugin")]
    assert plugin["status"] == "warn"
    assert plugin["detail"] == (f"not loaded: RAY_RUNTIME_ENV_PLUGINS={setting} in the raylet's "
                                "environment (its runtime-env agent's)")

"""The plugin without a cluster: the field's schema, URIs, refusals, a broken store, ray-env."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rtenv_cli.core.errors import ValidationError
from rtenv_cli.core.rayplugin import schema
from rtenv_cli.core.rayplugin.engine import Engine, SetupError, _resolve
from rtenv_cli.core.rayplugin.setup import format_env, ray_env_vars
from rtenv_cli.core.store import builders

LOG = logging.getLogger("test")


def test_importing_the_plugin_module_does_not_import_ray() -> None:
    code = ("import sys, rtenv_cli.ray_plugin as p; "
            "print(p.PLUGIN_CLASS, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["rtenv_cli.ray_plugin.RtenvPlugin", "False"]


def test_the_class_is_rays_plugin_and_constructs_with_a_broken_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private.runtime_env.plugin import RuntimeEnvPlugin, RuntimeEnvPluginManager

    from rtenv_cli.ray_plugin import RtenvPlugin

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("RTENV_HOME", str(blocker))  # the store cannot be made under a file
    monkeypatch.setenv("RAY_RUNTIME_ENV_PLUGINS", json.dumps(
        [{"class": schema.PLUGIN_CLASS, "priority": schema.PRIORITY}]))
    manager = RuntimeEnvPluginManager()  # what Ray's agent does at start: must not raise
    plugin = manager.plugins["rtenv"].class_instance
    assert isinstance(plugin, RuntimeEnvPlugin)
    assert isinstance(plugin, RtenvPlugin)
    env = {"rtenv": {"pip": ["six==1.16.0"]}}
    (uri,) = plugin.get_uris(env)
    assert uri.startswith("rtenv://")
    with pytest.raises(SetupError, match="cannot open the rtenv store") as info:
        asyncio.run(plugin.create(uri, env, None, LOG))
    assert "hint: set RTENV_HOME" in str(info.value)


@pytest.mark.parametrize("value", [None, [], "x", {"pip": 3}, {"pipp": ["six"]}, {"limits": {}},
                                   {"pip": ["six"], "uv": ["six"]}, {"pip": "rel/req.txt"}])
def test_get_uris_never_raises(value: object) -> None:
    uris = Engine().uris({"rtenv": value})  # an invalid field: create() reports it
    assert uris == [] or (isinstance(value, dict) and uris[0].startswith("rtenv://"))


def test_schema_names_the_key_and_suggests() -> None:
    with pytest.raises(ValidationError, match="unknown key 'pipp'") as info:
        schema.parse({"pipp": ["six"]})
    assert info.value.hint == "did you mean 'pip'?"
    with pytest.raises(ValidationError, match="exactly one"):
        schema.parse({"pip": ["six"], "uv": ["six"]})
    with pytest.raises(ValidationError, match="both `rtenv` and `pip`"):
        schema.parse({"pip": ["six"]}, {"rtenv": {}, "pip": ["six"]})
    with pytest.raises(ValidationError, match="relative") as rel:
        schema.parse({"pip": "requirements.txt"})
    assert "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/requirements.txt" in (rel.value.hint or "")
    assert schema.parse({"uv": {"packages": ["six"]}}).kind == "uv"


def test_uri_follows_the_contents_of_a_requirements_file(tmp_path: Path) -> None:
    req = tmp_path / "req.txt"
    req.write_text("six==1.16.0\n")
    engine = Engine()
    env = {"rtenv": {"pip": [f"-r {req}"]}}
    first = engine.uris(env)
    assert first == engine.uris(env)
    req.write_text("six==1.17.0\n")
    assert engine.uris(env) != first
    whole = {"rtenv": {"pip": str(req)}}
    before = engine.uris(whole)
    req.write_text("six==1.15.0\n")
    assert engine.uris(whole) != before


def test_venv_key_covers_nested_requirement_files(tmp_path: Path) -> None:
    (tmp_path / "inner.txt").write_text("six\n")
    (tmp_path / "outer.txt").write_text("-r inner.txt\n")
    key = builders.venv_key("pip", [f"-r {tmp_path / 'outer.txt'}"], [])
    (tmp_path / "inner.txt").write_text("six==1.16.0\n")
    assert builders.venv_key("pip", [f"-r {tmp_path / 'outer.txt'}"], []) != key
    assert builders.python_identity()["ray"] == __import__("ray").__version__
    assert builders.python_identity()["site"]


@pytest.mark.parametrize("packages", [["ray==2.9.0"], ["Ray[default]>=2"], ["six", "ray"]])
def test_a_spec_that_installs_ray_is_refused(packages: list[str]) -> None:
    with pytest.raises(ValidationError, match="a worker must import the node's own Ray"):
        _resolve(schema.parse({"pip": packages}), None)


def test_ray_in_a_referenced_file_is_refused(tmp_path: Path) -> None:
    req = tmp_path / "req.txt"
    req.write_text("six\nray[data]==2.9\n")
    with pytest.raises(ValidationError, match="installs `ray"):
        _resolve(schema.parse({"uv": [f"-r {req}"]}), None)
    assert _resolve(schema.parse({"uv": ["raydp", "x-ray"]}), None)[0] == "uv"


def test_working_dir_variable_is_expanded(tmp_path: Path) -> None:
    (tmp_path / "req.txt").write_text("six\n")
    kind, value, base = _resolve(schema.parse(
        {"pip": "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/req.txt"}), str(tmp_path))
    assert (kind, value["packages"], base) == ("pip", ["six"], tmp_path)
    with pytest.raises(ValidationError, match="no working_dir"):
        _resolve(schema.parse({"pip": "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/req.txt"}), None)


def test_ray_env_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RTENV_HOME")
    env = ray_env_vars(root=tmp_path, max_size="20GB")
    assert json.loads(env["RAY_RUNTIME_ENV_PLUGINS"]) == [
        {"class": "rtenv_cli.ray_plugin.RtenvPlugin", "priority": 9}]
    assert env["RAY_RUNTIME_ENV_RTENV_CACHE_SIZE_GB"] == "0"
    assert env["RTENV_HOME"] == str(tmp_path)
    shell = format_env(env, "shell")
    echoed = subprocess.run(["bash", "-c", shell + "\nprintf %s \"$RAY_RUNTIME_ENV_PLUGINS\""],
                            capture_output=True, text=True, check=True).stdout
    assert echoed == env["RAY_RUNTIME_ENV_PLUGINS"]
    assert json.loads(format_env(env, "json")) == {"env": env}
    listed = yaml.safe_load(format_env(env, "yaml"))["env"]
    assert {item["name"]: item["value"] for item in listed} == env
    assert "RTENV_HOME" not in ray_env_vars()


def test_ray_env_cli(tmp_path: Path) -> None:
    from tests.support.cli import run_cli as invoke

    result = invoke(["ray-env", "--format", "json", "--root", str(tmp_path)])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["env"]["RTENV_HOME"] == str(tmp_path)
    bad = invoke(["ray-env", "--format", "toml"])
    assert bad.exit_code == 2
    assert "use one of shell, json, yaml" in bad.stderr
    bad_size = invoke(["ray-env", "--max-size", "lots"])
    assert bad_size.exit_code == 2


def test_get_uris_logs_why_a_field_has_no_uri(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="rtenv.rayplugin"):
        assert Engine().uris({"rtenv": {"pipp": ["six"]}}) == []
    assert any("no URI" in r.getMessage() and "pipp" in r.getMessage() for r in caplog.records)


def test_lease_comes_from_rtenv_ray_lease_and_a_bad_value_falls_back() -> None:
    from rtenv_cli.core.rayplugin.engine import LEASE_S, lease_seconds
    from rtenv_cli.core.rayplugin.schema import LEASE_ENV

    assert lease_seconds({}) == LEASE_S
    assert lease_seconds({LEASE_ENV: "5s"}) == 5.0
    assert lease_seconds({LEASE_ENV: "2m"}) == 120.0
    assert lease_seconds({LEASE_ENV: "soon"}) == LEASE_S

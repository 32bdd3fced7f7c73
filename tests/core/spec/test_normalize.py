from __future__ import annotations

from pathlib import Path

import pytest

from rtenv_cli.core.spec import model
from rtenv_cli.core.spec.construct import normalize_runtime_env
from rtenv_cli.core.spec.normalize import (
    RuntimeEnvValueError,
    normalize_config,
    normalize_pip,
    normalize_uv,
)


def test_pip_list_and_file(tmp_path: Path) -> None:
    assert normalize_pip(["a", "b", "a"], tmp_path) == {"packages": ["a", "b"], "pip_check": False}
    (tmp_path / "req.txt").write_text("# c\nx==1\n\n")
    assert normalize_pip("req.txt", tmp_path)["packages"] == ["# c", "x==1"]
    assert normalize_pip([], tmp_path) is None
    with pytest.raises(RuntimeEnvValueError, match="is not a valid file") as info:
        normalize_pip("nope.txt", tmp_path)
    assert info.value.json_path == ("pip",)


def test_pip_dict_checks() -> None:
    with pytest.raises(RuntimeEnvValueError) as info:
        normalize_pip({"packages": ["a"], "pip_version": 23.3}, Path())
    assert info.value.python_type == "TypeError"
    assert info.value.json_path == ("pip", "pip_version")
    # item types are not checked in the dict form (Ray quirk)
    assert normalize_pip({"packages": [1, None]}, Path())["packages"] == [1, None]


def test_uv_second_pass_adds_default_options() -> None:
    assert normalize_uv(["a"], Path()) == {"packages": ["a"], "uv_check": False,
                                           "uv_pip_install_options": ["--no-cache"]}
    with pytest.raises(RuntimeEnvValueError, match="must be of type list"):
        normalize_uv({"packages": "req.txt"}, Path())


def test_config_defaults_and_unknown_keys() -> None:
    assert normalize_config({"setup_timeout": 5}) == model.CONFIG_DEFAULTS
    with pytest.raises(RuntimeEnvValueError) as info:
        normalize_config({"setup_timeout_seconds": 0})
    assert info.value.json_path == ("config", "setup_timeout_seconds")


def test_runtime_env_order_commit_and_renames(tmp_path: Path) -> None:
    out = normalize_runtime_env({"nsight": "default", "pip": ["x"], "foo": None}, tmp_path)
    assert out == {"foo": None, "_nsight": "default",
                   "pip": {"packages": ["x"], "pip_check": False},
                   "_ray_commit": model.RAY_COMMIT}
    assert normalize_runtime_env({"excludes": None}, tmp_path) == {}
    with pytest.raises(RuntimeEnvValueError) as info:
        normalize_runtime_env({"pip": [], "conda": "env"}, tmp_path)
    assert "cannot be specified at the same time" in info.value.message

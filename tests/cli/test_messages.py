"""Messages for the mistakes users make on the way: each names the mix-up and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize("quote", ['"', "'"])
def test_an_unclosed_quote_is_reported_where_it_opens(tmp_path: Path, quote: str) -> None:
    path = tmp_path / "runtime_env.yaml"
    path.write_text(f"env_vars:\n  A: {quote}hello\n  B: x\nworking_dir: .\n")
    result = run_cli(["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}:2:6: RTE001" in result.stdout
    assert "quote that opens here is never closed" in result.stdout
    assert "tabs" not in result.stdout


@pytest.mark.ray
def test_a_gcs_port_given_as_http_names_the_mix_up(ray_cluster, tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("X = 1\n")
    port = ray_cluster.address.rpartition(":")[2]
    result = run_cli(["push", str(tmp_path / "src"), "--address", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 2, result.stderr
    assert f"http://127.0.0.1:{port} is a gRPC port (the Ray GCS's)" in result.stderr
    assert f"--address 127.0.0.1:{port}" in result.stderr
    assert "connection reset" not in result.stderr


def test_a_package_over_the_dashboards_limit_suggests_the_gcs(tmp_path: Path) -> None:
    from rtenv_cli.core.errors import PackageTooLargeError
    from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget

    sparse = tmp_path / "big.zip"
    with sparse.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024 + 1)
    target = RayDashboardTarget("http://127.0.0.1:1")  # refused before any request
    with pytest.raises(PackageTooLargeError) as caught:
        target.upload("gcs://_ray_pkg_00000000000000ff.zip", sparse)
    assert "--address 127.0.0.1:6379" in (caught.value.hint or "")


@pytest.mark.parametrize("args", [
    ["validate", "--format", "json", "--bogus"],
    ["cache", "ls", "--format=json", "--older-than"],
    ["explain", "-f", "json", "--num-cpus", "many"],
    ["bogus", "--format", "json"],
])
def test_click_usage_errors_follow_format_json(args: list[str]) -> None:
    from tests.support.cli import run_process

    result = run_process(args)
    assert result.exit_code == 2
    error = result.json["error"]
    assert error["code"] == "usage"
    assert error["message"]
    assert error["hint"].startswith("see `rtenv")


def test_click_usage_errors_stay_text_without_format_json() -> None:
    from tests.support.cli import run_process

    result = run_process(["validate", "--bogus", "--", "--format", "json"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "No such option: --bogus" in result.stderr

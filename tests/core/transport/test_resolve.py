"""One resolver for every command: what an address names (agent, dashboard, GCS, file, local,
auto), decided by asking the real servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rtenv_cli.core.errors import TransportError, UsageError
from rtenv_cli.core.transport.ray_gcs import RayGcsTarget
from rtenv_cli.core.transport.resolve import (
    AddressKind,
    auto_address,
    dashboard_gcs,
    gcs_address_of_dashboard,
    resolve_address,
    resolve_target,
)
from tests.support.agent import agent_process
from tests.support.fake_dashboard import SummaryDashboard, fake_dashboard, raylet, summary
from tests.support.ports import free_port


def test_local_file_and_refused_forms() -> None:
    assert resolve_address("local", {}).kind is AddressKind.LOCAL
    assert resolve_address("file:///shared/x", {}).kind is AddressKind.FILE
    for bad, words in [("ray://head:10001", "Ray Client"), ("s3://b/k", "unsupported"),
                       ("head", "not an address")]:
        with pytest.raises(UsageError, match=words):
            resolve_address(bad, {})


def test_an_agent_url_is_an_agent_and_a_plain_http_server_a_dashboard(tmp_path: Path) -> None:
    with agent_process(tmp_path / "store") as agent:
        addr = resolve_address(agent.url, {})
        assert (addr.kind, addr.value) == (AddressKind.AGENT, agent.url)
        # without a scheme the port answers HTTP/1, not gRPC: still the agent
        bare = resolve_address(agent.url.removeprefix("http://"), {})
        assert bare.kind is AddressKind.AGENT
        with pytest.raises(UsageError) as refused:
            addr.require(AddressKind.GCS, AddressKind.DASHBOARD, command="rtenv explain --verify")
        assert f"cannot use {agent.url}, an rtenv agent" in refused.value.message
        assert "6379" in (refused.value.hint or "")


def test_an_unreachable_host_port_is_taken_as_a_gcs() -> None:
    addr = resolve_address(f"127.0.0.1:{free_port()}", {})
    assert addr.kind is AddressKind.GCS
    assert addr.channel is None


def test_auto_reads_rays_address_file(tmp_path: Path) -> None:
    env = {"RAY_TMPDIR": str(tmp_path)}
    with pytest.raises(UsageError, match="no Ray cluster was started") as none:
        resolve_address("auto", env)
    assert "ray start --head" in (none.value.hint or "")
    (tmp_path / "ray").mkdir()
    port = free_port()
    (tmp_path / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    assert auto_address(env) == f"127.0.0.1:{port}"
    # the file names a cluster that is gone (ray stop did not run): said clearly
    with pytest.raises(TransportError, match="does not answer") as gone:
        resolve_address("auto", env)
    assert "no local Ray cluster runs" in (gone.value.hint or "")
    # TMPDIR is Ray's fallback when RAY_TMPDIR is unset
    assert auto_address({"TMPDIR": str(tmp_path)}) == f"127.0.0.1:{port}"


@pytest.mark.ray
def test_ray_addresses_and_the_dashboards_gcs(ray_cluster) -> None:
    gcs = resolve_address(ray_cluster.address, {})
    assert gcs.kind is AddressKind.GCS
    gcs.close()
    dash = resolve_address(ray_cluster.dashboard_url, {})
    assert dash.kind is AddressKind.DASHBOARD
    assert gcs_address_of_dashboard(ray_cluster.dashboard_url, {}) == ray_cluster.address
    auto = resolve_address("auto", {"RAY_TMPDIR": str(ray_cluster.temp_dir)})
    assert auto.kind is AddressKind.GCS
    assert auto.value.endswith(f":{ray_cluster.gcs_port}")
    auto.close()
    # push takes RAY_ADDRESS=auto as ray.init does (it was refused)
    target = resolve_target(None, None, {"RAY_ADDRESS": "auto",
                                         "RAY_TMPDIR": str(ray_cluster.temp_dir)})
    assert isinstance(target, RayGcsTarget)
    target.close()



@pytest.fixture
def dashboard() -> Iterator[str]:
    with fake_dashboard() as url:
        yield url


def test_a_dashboards_gcs_is_read_from_its_head_raylets_flags(dashboard: str) -> None:
    SummaryDashboard.reply = summary(
        raylet("--gcs-address=10.0.0.8:7000 --cluster-id=e5f6", head=False),
        raylet("--gcs-address=10.0.0.5:6380 --cluster-id=c1d2"))
    found = dashboard_gcs(dashboard, {})
    # the port on the dashboard's host (the one this machine reaches), the head's first
    assert (found.address, found.advertised, found.cluster_id) == \
        ("127.0.0.1:6380", "10.0.0.5:6380", "c1d2")
    assert SummaryDashboard.seen == ["/nodes?view=summary"]

@pytest.mark.parametrize(("status", "error", "words"), [
    (401, TransportError, "requires a token"), (403, TransportError, "refused the token"),
    (404, UsageError, "cannot find the Ray GCS address")])
def test_a_dashboard_that_names_no_gcs_is_said_at_once(
        dashboard: str, status: int, error: type[Exception], words: str) -> None:
    SummaryDashboard.reply = (status, {})
    with pytest.raises(error, match=words):
        dashboard_gcs(dashboard, {}, wait_s=600)
    assert len(SummaryDashboard.seen) == 1  # not asked again: only a head still starting is

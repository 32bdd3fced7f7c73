"""Direct pushes to a real Ray 2.60 GCS: the calls Ray's driver makes, streamed over h2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rtenv_cli.core.errors import PackageTooLargeError, TransportError
from rtenv_cli.core.transport.grpc_unary import (
    NotGrpcError,
    field_bytes,
    field_varint,
    parse_fields,
    varint,
)
from rtenv_cli.core.transport.ray_dashboard import RayDashboardTarget
from rtenv_cli.core.transport.ray_gcs import RayGcsTarget
from rtenv_cli.core.transport.resolve import resolve_target


def fresh_uri() -> str:
    return f"gcs://_ray_pkg_{os.urandom(8).hex()}.zip"


def test_messages_parse_as_rays_own_protobufs() -> None:
    from ray.core.generated import gcs_service_pb2 as pb

    head = field_bytes(1, b"gcs://_ray_pkg_00.zip") + field_varint(3, 1)
    value = os.urandom(300)
    msg = pb.InternalKVPutRequest.FromString(head + varint(2 << 3 | 2) + varint(300) + value)
    assert (msg.key, msg.value, msg.overwrite, msg.namespace) == (
        b"gcs://_ray_pkg_00.zip", value, True, b"")
    pin = pb.PinRuntimeEnvURIRequest.FromString(field_bytes(1, b"gcs://x.zip") +
                                                field_varint(2, 600))
    assert (pin.uri, pin.expiration_s) == ("gcs://x.zip", 600)
    reply = pb.InternalKVExistsReply(exists=True)
    reply.status.code = 5
    reply.status.message = "nope"
    fields = dict(parse_fields(reply.SerializeToString()))
    assert fields[2] == 1
    assert dict(parse_fields(fields[1])) == {1: 5, 2: b"nope"}  # type: ignore[arg-type]


@pytest.mark.ray
def test_upload_is_seen_by_the_dashboard_and_streams_large_files(ray_cluster,
                                                                 tmp_path: Path) -> None:
    target = RayGcsTarget.connect(ray_cluster.address)
    uri = fresh_uri()
    assert target.exists(uri) is False
    package = tmp_path / "p.zip"
    package.write_bytes(os.urandom(9 * 2**20 + 123))  # several chunks and flow-control windows
    progress: list[int] = []
    target.upload(uri, package, on_progress=progress.append)
    assert sum(progress) == package.stat().st_size
    assert len(progress) > 1
    assert target.exists(uri) is True
    # the same key Ray's dashboard and nodes read
    import requests

    resp = requests.get(f"{ray_cluster.dashboard_url}/api/packages/gcs/{uri[6:]}", timeout=30)
    assert resp.status_code == 200
    target.close()


def _kv_get(target: RayGcsTarget, uri: str) -> bytes:
    reply = target.channel().unary("/ray.rpc.InternalKVGcsService/InternalKVGet",
                                   field_bytes(1, uri.encode()))
    return dict(parse_fields(reply)).get(2, b"")  # type: ignore[return-value]


@pytest.mark.ray
def test_uploads_on_one_connection_arrive_intact_and_keep_flow_control_exact(
        ray_cluster, tmp_path: Path) -> None:
    """The tail goes by sendfile outside h2: the GCS must hold exactly the file's bytes, and
    h2's view of the connection's send window must stay what the server granted minus what
    was sent (grown by what it did not send, a long watch session would overflow it)."""
    from h2.events import WindowUpdated

    target = RayGcsTarget.connect(ray_cluster.address)
    channel = target.channel()
    conn = channel._conn
    expected = conn.outbound_flow_control_window
    receive, unary = conn.receive_data, channel.unary

    def counting_receive(data: bytes) -> list[object]:
        nonlocal expected
        events = receive(data)
        expected += sum(e.delta for e in events if isinstance(e, WindowUpdated)
                        and not e.stream_id)
        return events

    def counting_unary(method: str, message: bytes, **kw: object) -> bytes:
        nonlocal expected
        expected -= 5 + len(message) + int(kw.get("tail_size", 0))  # type: ignore[call-overload]
        return unary(method, message, **kw)  # type: ignore[arg-type]

    conn.receive_data = counting_receive  # type: ignore[method-assign]
    channel.unary = counting_unary  # type: ignore[method-assign]
    for i in range(3):
        uri = fresh_uri()
        data = os.urandom(9 * 2**20 + i)
        (tmp_path / "p.zip").write_bytes(data)
        target.upload(uri, tmp_path / "p.zip")
        assert _kv_get(target, uri) == data
        assert conn.outbound_flow_control_window == expected
    target.close()


@pytest.mark.ray
def test_a_file_that_shrinks_while_sent_fails_and_the_next_call_reconnects(
        ray_cluster, tmp_path: Path) -> None:
    from rtenv_cli.core.transport.grpc_unary import GrpcError

    target = RayGcsTarget.connect(ray_cluster.address)
    uri = fresh_uri()
    short = tmp_path / "short.zip"
    short.write_bytes(os.urandom(1000))
    head = field_bytes(1, uri.encode()) + field_varint(3, 1) + varint(2 << 3 | 2) + varint(5000)
    with short.open("rb") as fh, pytest.raises(GrpcError) as info:
        target.channel().unary("/ray.rpc.InternalKVGcsService/InternalKVPut", head, tail=fh,
                               tail_size=5000)
    assert info.value.code == 13
    assert "shrank" in info.value.message
    assert target.exists(uri) is False  # nothing half-written; the target reconnected
    target.close()


@pytest.mark.ray
def test_an_http_port_without_scheme_is_taken_as_the_dashboard(ray_cluster) -> None:
    with pytest.raises(NotGrpcError):
        RayGcsTarget.connect(ray_cluster.dashboard_url.removeprefix("http://"))
    target = resolve_target(None, ray_cluster.dashboard_url.removeprefix("http://"), {})
    assert isinstance(target, RayDashboardTarget)
    assert isinstance(resolve_target(None, ray_cluster.address, {}), RayGcsTarget)


@pytest.mark.ray
def test_token_auth(ray_cluster_token, tmp_path: Path) -> None:
    uri = fresh_uri()
    with pytest.raises(TransportError) as missing:
        RayGcsTarget(ray_cluster_token.address, env={"HOME": str(tmp_path)}).exists(uri)
    assert "RAY_AUTH_TOKEN" in (missing.value.hint or "")
    with pytest.raises(TransportError, match="refused"):
        RayGcsTarget(ray_cluster_token.address, env={"RAY_AUTH_TOKEN": "x" * 32}).exists(uri)
    good = RayGcsTarget(ray_cluster_token.address, env={"RAY_AUTH_TOKEN": ray_cluster_token.token})
    package = tmp_path / "p.zip"
    package.write_bytes(b"PK-not-really-a-zip")
    assert good.exists(uri) is False
    good.upload(uri, package)
    assert good.exists(uri) is True


def test_size_is_checked_before_connecting(tmp_path: Path) -> None:
    package = tmp_path / "p.zip"
    package.write_bytes(b"x" * 10_000)
    # port 9 (discard) is never contacted: the check comes first
    target = RayGcsTarget("127.0.0.1:9", env={"RAY_max_grpc_message_size": "8192"})
    with pytest.raises(PackageTooLargeError, match="upload limit"):
        target.upload(fresh_uri(), package)


def test_unreachable_gcs_is_a_clear_error() -> None:
    from tests.support.ports import free_port

    with pytest.raises(TransportError) as info:
        RayGcsTarget(f"127.0.0.1:{free_port()}", env={}).exists(fresh_uri())
    assert "cannot reach" in info.value.message
    assert "6379" in (info.value.hint or "")


@pytest.mark.ray
def test_a_re_push_uploads_the_spliced_zip(
        ray_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-push to the GCS splices the zip from the last build: what the GCS holds is, byte
    for byte, what a fresh build of the edited tree writes."""
    from rtenv_cli.core.packaging.build import build_package
    from rtenv_cli.core.push import push

    monkeypatch.setenv("RTENV_HOME", str(tmp_path / "home"))
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    for i in range(40):
        (src / "data" / f"b{i}.bin").write_bytes(os.urandom(100_000))
    (src / "main.py").write_text("X = 1\n")
    target = RayGcsTarget.connect(ray_cluster.address)
    push(src, target=target, env={})
    (src / "main.py").write_text("X = 2  # edited\n")
    second = push(src, target=target, env={})
    assert second.packages[0].uploaded
    uri = second.packages[0].ray_uri
    fresh = build_package(src, kind="working_dir", env={}, dest_dir=tmp_path / "fresh",
                          use_cache=False)
    assert fresh.uri == uri
    assert _kv_get(target, uri) == fresh.path.read_bytes()
    target.close()


@pytest.mark.ray
def test_a_cancelled_upload_stores_nothing_and_the_connection_goes_on(
        ray_cluster, tmp_path: Path) -> None:
    import threading

    target = RayGcsTarget.connect(ray_cluster.address)
    package = tmp_path / "p.zip"
    package.write_bytes(os.urandom(12 * 2**20))
    cancel = threading.Event()
    frames: list[int] = []

    def sent(n: int) -> None:  # cancel once the first frames are on their way
        frames.append(n)
        if len(frames) == 2:
            cancel.set()

    uri = fresh_uri()
    with pytest.raises(TransportError, match="cancelled"):
        target.upload(uri, package, on_progress=sent, cancel=cancel)
    assert len(frames) == 2
    channel = target.channel()
    assert target.exists(uri) is False  # the server dropped the partial message
    assert target.channel() is channel  # the same connection: only the stream was reset
    other = fresh_uri()
    target.upload(other, package)
    assert _kv_get(target, other) == package.read_bytes()
    target.close()


@pytest.mark.ray
def test_an_upload_abandoned_midway_resets_its_stream(ray_cluster, tmp_path: Path) -> None:
    """An upload abandoned mid-file (an exception in the middle, as a Ctrl-C): the call fails,
    the GCS keeps nothing, and the same connection carries the next call (the abandoned stream
    was reset, not left open)."""
    from rtenv_cli.core.errors import PackagingError

    target = RayGcsTarget.connect(ray_cluster.address)
    package = tmp_path / "p.zip"
    package.write_bytes(os.urandom(12 * 2**20))
    seen: list[int] = []

    def sent(n: int) -> None:
        seen.append(n)
        if len(seen) == 2:
            raise PackagingError("interrupted: simulated")

    uri = fresh_uri()
    with pytest.raises(PackagingError, match="simulated"):
        target.upload(uri, package, on_progress=sent)
    channel = target.channel()
    assert target.exists(uri) is False
    assert target.channel() is channel
    assert not channel._conn.open_outbound_streams  # the abandoned stream is closed
    target.close()


@pytest.mark.ray
def test_without_h2s_stream_object_the_file_is_sent_through_h2(ray_cluster,
                                                                 tmp_path: Path) -> None:
    """The sendfile path debits a window h2 keeps on a private stream object; an h2 without
    it gets the file through h2's own send_data, whole and intact."""
    target = RayGcsTarget.connect(ray_cluster.address)
    target.channel()._h2_stream = lambda _sid: None  # type: ignore[method-assign]
    package = tmp_path / "p.zip"
    package.write_bytes(os.urandom(9 * 2**20 + 7))
    progress: list[int] = []
    uri = fresh_uri()
    target.upload(uri, package, on_progress=progress.append)
    assert _kv_get(target, uri) == package.read_bytes()
    assert sum(progress) == package.stat().st_size
    assert max(progress) <= 1 << 20  # h2's path: 1 MiB chunks, not 4 MiB sendfile frames
    target.close()

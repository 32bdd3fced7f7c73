"""RayKV's calls against Ray's own protobufs and a real head."""

from __future__ import annotations

import os

import pytest

from rtenv_cli.core.transport.ray_gcs import RayGcsTarget
from rtenv_cli.core.transport.ray_kv import RayKV


class _Recording(RayGcsTarget):
    """Keeps the request of each call instead of sending it."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:1")
        self.sent: list[tuple[str, bytes]] = []

    def _call(self, method: str, message: bytes, **kw: object) -> bytes:  # type: ignore[override]
        tail = kw.get("tail")
        size = int(kw.get("tail_size", 0))  # type: ignore[call-overload]
        body = bytes(tail)[:size] if tail is not None else b""  # type: ignore[call-overload]
        self.sent.append((method, message + body))
        return b""


@pytest.mark.parametrize("size", [5000, 300_000])
def test_put_is_rays_put_request_whatever_the_value_s_size(size: int) -> None:
    """A large value goes as the request's tail (after the other fields), a small one inline:
    either way Ray's protobuf reads the same request."""
    from ray.core.generated import gcs_service_pb2 as pb

    value = os.urandom(size)
    target = _Recording()
    RayKV(target).put("p:abc", bytearray(value))
    method, raw = target.sent[0]
    assert method.endswith("/InternalKVPut")
    msg = pb.InternalKVPutRequest.FromString(raw)
    assert (msg.key, msg.value, msg.overwrite, msg.namespace) == (b"p:abc", value, True,
                                                                  b"rtenv")


@pytest.mark.ray
@pytest.mark.parametrize("direct", [True, False])
def test_a_large_put_stores_what_get_reads(ray_cluster, monkeypatch: pytest.MonkeyPatch,
                                           direct: bool) -> None:
    """Its frames written by rtenv (sendmsg from the buffer) or by h2 (DIRECT_FRAMES off)."""
    from rtenv_cli.core.transport import grpc_unary

    monkeypatch.setattr(grpc_unary, "DIRECT_FRAMES", direct)
    value = os.urandom(6 * 2**20 + 7)  # several DATA frames and flow-control windows
    kv = RayKV.connect(ray_cluster.address, env={})
    try:
        kv.put("p:test-large-put", bytearray(value))
        assert kv.get("p:test-large-put") == value
        kv.put("p:test-large-put", b"small")  # the connection is still in step
        assert kv.get("p:test-large-put") == b"small"
    finally:
        kv.delete("p:test-large-put")
        kv.close()

"""RayKV's calls against Ray's own protobufs and a real head."""

from __future__ import annotations

import os
from pathlib import Path

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
        body = Path(tail).read_bytes()[:size] if tail is not None else b""  # type: ignore[arg-type]
        self.sent.append((method, message + body))
        return b""


def test_put_file_is_rays_put_request_with_the_file_as_its_value(tmp_path: Path) -> None:
    from ray.core.generated import gcs_service_pb2 as pb

    value = os.urandom(5000)
    (tmp_path / "v").write_bytes(value + b"not sent")
    target = _Recording()
    RayKV(target).put_file("p:abc", tmp_path / "v", len(value))
    method, raw = target.sent[0]
    assert method.endswith("/InternalKVPut")
    msg = pb.InternalKVPutRequest.FromString(raw)
    assert (msg.key, msg.value, msg.overwrite, msg.namespace) == (b"p:abc", value, True,
                                                                  b"rtenv")


@pytest.mark.ray
def test_put_file_stores_what_get_reads(ray_cluster, tmp_path: Path) -> None:
    value = os.urandom(6 * 2**20 + 7)  # several DATA frames and flow-control windows
    (tmp_path / "v").write_bytes(value)
    kv = RayKV.connect(ray_cluster.address, env={})
    try:
        kv.put_file("p:test-put-file", tmp_path / "v", len(value))
        assert kv.get("p:test-put-file") == value
    finally:
        kv.delete("p:test-put-file")
        kv.close()

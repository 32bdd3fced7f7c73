"""A Ray cluster's GCS internal KV, in rtenv's own namespace, over rtenv's gRPC client.

The calls are Ray's `InternalKVGcsService` (Get, MultiGet, Put, Exists, Keys, Del) and
`NodeInfoGcsService.GetAllNodeInfo`, encoded with grpc_unary's protobuf primitives: the CLI
never imports Ray, and the plugin (inside Ray's agent, which has no GCS client to give it) uses
the same client with the agent's `--gcs-address` and token. Ray never deletes a plugin's keys;
rtenv's gc does (trees/gc.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rtenv_cli.core.transport.grpc_unary import field_bytes, field_varint, parse_fields, varint
from rtenv_cli.core.transport.ray_gcs import RayGcsTarget, _check_status

NAMESPACE = b"rtenv"
_KV = "/ray.rpc.InternalKVGcsService/"
_NODES = "/ray.rpc.NodeInfoGcsService/GetAllNodeInfo"
_ALIVE = 0  # GcsNodeInfo.GcsNodeState.ALIVE


class RayKV:
    """rtenv's namespace of one cluster's internal KV. One call at a time per instance (one
    HTTP/2 connection); `fork` gives another connection for parallel transfers."""

    def __init__(self, target: RayGcsTarget, namespace: bytes = NAMESPACE) -> None:
        self.target = target
        self.namespace = namespace

    @classmethod
    def connect(cls, address: str, env: Mapping[str, str] | None = None,
                token: str | None = None) -> RayKV:
        return cls(RayGcsTarget(address, env=env, token=token))

    @property
    def address(self) -> str:
        return self.target.address

    def fork(self) -> RayKV:
        return RayKV(self.target.fork(), self.namespace)

    def close(self) -> None:
        self.target.close()

    def _ns(self, number: int) -> bytes:
        return field_bytes(number, self.namespace)

    def get(self, key: str) -> bytes | None:
        reply = self.target.call(_KV + "InternalKVGet", field_bytes(1, key.encode()) + self._ns(2))
        for n, v in parse_fields(reply):
            if n == 2 and isinstance(v, bytes):  # noqa: PLR2004 - `value`
                return v
        # proto3 drops an empty value: tell "empty" from "absent"
        return b"" if self.exists(key) else None

    def multi_get(self, keys: Sequence[str]) -> dict[str, bytes]:
        msg = b"".join(field_bytes(1, k.encode()) for k in keys) + self._ns(2)
        out: dict[str, bytes] = {}
        for n, v in parse_fields(self.target.call(_KV + "InternalKVMultiGet", msg)):
            if n == 2 and isinstance(v, bytes):  # noqa: PLR2004 - `results`
                entry = dict(parse_fields(v))
                key = entry.get(1, b"")
                out[key.decode() if isinstance(key, bytes) else str(key)] = \
                    entry.get(2, b"") if isinstance(entry.get(2, b""), bytes) else b""  # type: ignore[assignment]
        return out

    def put(self, key: str, value: bytes, *, overwrite: bool = True) -> None:
        self.target.call(_KV + "InternalKVPut", field_bytes(1, key.encode()) +
                         field_bytes(2, value) + field_varint(3, int(overwrite)) + self._ns(4))

    def put_file(self, key: str, path: Path, size: int) -> None:
        """`put` (overwriting) of the first `size` bytes of the file `path`, which go to the
        socket by sendfile as a package upload's do (grpc_unary's module doc): no copy of them
        in Python, where `put` frames its value through h2 (several copies of every byte)."""
        head = (field_bytes(1, key.encode()) + field_varint(3, 1) + self._ns(4) +
                varint(2 << 3 | 2) + varint(size))  # the value last: its bytes follow
        # the call RayGcsTarget.upload makes (retries, the file sent again from its start)
        reply = self.target._call(
            _KV + "InternalKVPut", head, tail=path, tail_size=size)
        _check_status(reply, 1, self.target.label)

    def exists(self, key: str) -> bool:
        reply = self.target.call(_KV + "InternalKVExists",
                                 field_bytes(1, key.encode()) + self._ns(2))
        return any(n == 2 and v for n, v in parse_fields(reply))  # noqa: PLR2004 - `exists`

    def keys(self, prefix: str) -> list[str]:
        reply = self.target.call(_KV + "InternalKVKeys",
                                 field_bytes(1, prefix.encode()) + self._ns(2))
        return [v.decode() for n, v in parse_fields(reply)
                if n == 2 and isinstance(v, bytes)]  # noqa: PLR2004 - `results`

    def delete(self, key: str, *, by_prefix: bool = False) -> int:
        reply = self.target.call(_KV + "InternalKVDel", field_bytes(1, key.encode()) +
                                 self._ns(2) + field_varint(3, int(by_prefix)))
        return next((int(v) for n, v in parse_fields(reply)
                     if n == 2 and isinstance(v, int)), 0)  # noqa: PLR2004 - `deleted_num`

    def alive_nodes(self) -> dict[str, str]:
        """node id (hex) -> node address, for every alive node of the cluster."""
        reply = self.target.call(_NODES, b"")
        out: dict[str, str] = {}
        for n, v in parse_fields(reply):
            if n != 2 or not isinstance(v, bytes):  # noqa: PLR2004 - `node_info_list`
                continue
            info = dict(parse_fields(v))
            node_id, ip = info.get(1, b""), info.get(2, b"")
            if info.get(7, _ALIVE) == _ALIVE and isinstance(node_id, bytes):
                out[node_id.hex()] = ip.decode() if isinstance(ip, bytes) else ""
        return out

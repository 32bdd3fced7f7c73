"""A Ray cluster's GCS internal KV, in rtenv's own namespace, over rtenv's gRPC client.

The calls are Ray's `InternalKVGcsService` (Get, MultiGet, Put, Exists, Keys, Del) and
`NodeInfoGcsService.GetAllNodeInfo`, encoded with grpc_unary's protobuf primitives: the CLI
never imports Ray, and the plugin (inside Ray's agent, which has no GCS client to give it) uses
the same client with the agent's `--gcs-address` and token. Ray never deletes a plugin's keys;
rtenv's gc does (trees/gc.py).

Given a dashboard URL, the KV is reached through the GCS that dashboard names
(`RayKV.through_dashboard`), because Ray 2.60's dashboard has no route that reads its KV. What it
has for bytes is the job module's `PUT|GET /api/packages/{protocol}/{name}` (job_head.py), built
for `ray job submit`'s zips: PUT stores the body (up to its 100 MiB limit) under the key
`gcs://{name}` in the default namespace, never rtenv's; GET answers only 200/404, no content,
and first pins `gcs://{name}` for 10 minutes, after which the GCS deletes that key unless a job
references it (its RuntimeEnvManager deletes `gcs://` URIs whose references all ran out); there
is no listing and no delete. So a push through it could not learn what the cluster already has
(one prefix listing of `x:`), could not read the announcements of the nodes' plugins (`n:`), nor
a manifest's chain, and each existence check would doom what it checked: O(change) re-pushes,
the readiness check and gc all need the KV itself. The GCS address is not on any documented
route either: it is read from the head raylet's command line in the dashboard's node summary
(resolve.dashboard_gcs), and the GCS there must report the same cluster id as that command line
(a dashboard port-forwarded to this machine may sit beside a local Ray of another cluster on the
GCS port). A cluster that exposes only its dashboard keeps Ray's zip path (core/push.py says so).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rtenv_cli.core.errors import TransportError
from rtenv_cli.core.transport.grpc_unary import (
    Buffer,
    field_bytes,
    field_varint,
    parse_fields,
    varint,
)
from rtenv_cli.core.transport.ray_gcs import RayGcsTarget, _check_status

if TYPE_CHECKING:
    from rtenv_cli.core.transport.resolve import Address

NAMESPACE = b"rtenv"
_KV = "/ray.rpc.InternalKVGcsService/"
_NODES = "/ray.rpc.NodeInfoGcsService/GetAllNodeInfo"
_CLUSTER_ID = "/ray.rpc.NodeInfoGcsService/GetClusterId"
_ALIVE = 0  # GcsNodeInfo.GcsNodeState.ALIVE
# GcsNodeInfo's fields: 1 node_id, 2 node_manager_address, 7 state, 23 start_time_ms
_TAIL_BYTES = 64 << 10  # a put's value from this size on is sent as the request's tail


class NoGcsRoute(TransportError):
    """A dashboard whose cluster's GCS cannot be used from here (RayKV.through_dashboard)."""


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

    @classmethod
    def of_address(cls, where: Address, env: Mapping[str, str] | None = None,
                   token: str | None = None) -> RayKV:
        """The KV of the Ray cluster `where` names: its GCS, or the GCS its dashboard names."""
        from rtenv_cli.core.transport.resolve import AddressKind

        if where.kind is AddressKind.DASHBOARD:
            return cls.through_dashboard(where.value, env, token)
        return cls.connect(where.value, env, token)

    @classmethod
    def through_dashboard(cls, url: str, env: Mapping[str, str] | None = None,
                          token: str | None = None) -> RayKV:
        """The KV of the cluster whose dashboard is `url`, through the GCS it names (see the
        module doc). NoGcsRoute when the dashboard names none, or that GCS does not answer
        here or is another cluster's; other errors (the dashboard unreachable, its token
        refused) as they are. `token`: the cluster's (one token serves its dashboard and GCS)."""
        from rtenv_cli.core.errors import UsageError
        from rtenv_cli.core.transport.grpc_unary import Channel, GrpcError, NotGrpcError
        from rtenv_cli.core.transport.ray_dashboard import load_token
        from rtenv_cli.core.transport.ray_gcs import READ_TIMEOUT, split_host_port
        from rtenv_cli.core.transport.resolve import dashboard_gcs, probe_timeouts

        env = dict(os.environ if env is None else env)
        try:
            gcs = dashboard_gcs(url, env, token)
        except UsageError as exc:
            raise NoGcsRoute(exc.message, hint=exc.hint) from None
        if token is None:
            token = load_token(env, to=gcs.address)
        meta = [("authorization", f"Bearer {token}")] if token else []
        host, port = split_host_port(gcs.address)
        try:
            channel = Channel(host, port, metadata=meta, timeout=READ_TIMEOUT,
                              connect_timeout=probe_timeouts().connect)
        except (GrpcError, NotGrpcError) as exc:
            raise NoGcsRoute(f"the GCS of {url} ({gcs.address}; {gcs.advertised} inside the "
                             f"cluster) does not answer here: {exc}",
                             hint=f"reach it from here (e.g. forward port {port}) and give it: "
                             "--address <host>:<port>") from None
        kv = cls(RayGcsTarget(gcs.address, env=env, token=token, channel=channel))
        kv.target.label = f"Ray cluster {url} (its GCS {gcs.address})"
        try:
            found = kv.cluster_id()
        except BaseException:
            kv.close()
            raise
        if found != gcs.cluster_id:
            kv.close()
            raise NoGcsRoute(f"{gcs.address} is not the GCS of {url} ({gcs.advertised} inside "
                             f"the cluster): another cluster answers there (cluster "
                             f"{found[:12]}, not {gcs.cluster_id[:12]})",
                             hint="give the GCS address of the dashboard's cluster: --address "
                             "<host>:<port>")
        return kv

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

    def put(self, key: str, value: Buffer, *, overwrite: bool = True) -> None:
        """Store `value` under `key`. A large value is the request's tail (grpc_unary), last in
        the message: its bytes go to the socket from `value` itself, never copied in Python."""
        head = field_bytes(1, key.encode()) + field_varint(3, int(overwrite)) + self._ns(4)
        size = len(memoryview(value).cast("B"))
        if size < _TAIL_BYTES:
            self.target.call(_KV + "InternalKVPut", head + field_bytes(2, bytes(value)))
            return
        reply = self.target._call(_KV + "InternalKVPut", head + varint(2 << 3 | 2) + varint(size),
                                  tail=value, tail_size=size)
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

    def cluster_id(self) -> str:
        """The cluster's id (hex), as its nodes' `--cluster-id` flag shows it."""
        reply = self.target.call(_CLUSTER_ID, b"")
        return next((v.hex() for n, v in parse_fields(reply)
                     if n == 2 and isinstance(v, bytes)), "")  # noqa: PLR2004 - `cluster_id`

    def alive_nodes(self) -> dict[str, str]:
        """node id (hex) -> node address, for every alive node of the cluster."""
        return {n: address for n, (address, _started) in self.alive_node_starts().items()}

    def alive_node_starts(self) -> dict[str, tuple[str, int]]:
        """node id (hex) -> (node address, when the node started: ms since the epoch, by its
        own clock), for every alive node of the cluster."""
        reply = self.target.call(_NODES, b"")
        out: dict[str, tuple[str, int]] = {}
        for n, v in parse_fields(reply):
            if n != 2 or not isinstance(v, bytes):  # noqa: PLR2004 - `node_info_list`
                continue
            info = dict(parse_fields(v))
            node_id, ip, started = info.get(1, b""), info.get(2, b""), info.get(23, 0)
            if info.get(7, _ALIVE) == _ALIVE and isinstance(node_id, bytes):
                out[node_id.hex()] = (ip.decode() if isinstance(ip, bytes) else "",
                                      started if isinstance(started, int) else 0)
        return out

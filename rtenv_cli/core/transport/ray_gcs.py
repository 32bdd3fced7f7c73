"""Push straight to a Ray cluster's GCS (`host:6379`), the way `ray.init(runtime_env=...)` does.

Ray's driver uploads a package with one GCS call, `InternalKVPut(key=<gcs:// URI>, value=<zip>)`
in the default namespace (ray_constants.KV_NAMESPACE_PACKAGE is None), after pinning the URI
with `RuntimeEnvGcsService.PinRuntimeEnvURI` for RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S
(600 s) so the GCS does not delete it before a job references it. The dashboard's
`/api/packages` does the same calls after reading the whole body; going direct skips that hop
(benchmarks/results/push.json: "re-push after a one-file edit (83 MB), to the GCS address",
beside the row for the dashboard URL) and its 100 MiB limit: the GCS takes messages
up to RAY_max_grpc_message_size (512 MiB). The zip is streamed from disk (see grpc_unary).
Token auth (RAY_AUTH_MODE=token) is the same bearer token as the dashboard's, sent as gRPC
metadata.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtenv_cli.core.errors import TransportError
from rtenv_cli.core.transport.base import PIN_SECONDS, ZipLayout
from rtenv_cli.core.transport.grpc_unary import (
    Buffer,
    Channel,
    GrpcError,
    NotGrpcError,
    field_bytes,
    field_varint,
    parse_fields,
    varint,
)
from rtenv_cli.core.transport.ray_dashboard import load_token, package_name, too_large_error

_KV = "/ray.rpc.InternalKVGcsService/"
_PIN = "/ray.rpc.RuntimeEnvGcsService/PinRuntimeEnvURI"
GRPC_MAX = 512 * 1024 * 1024  # ray_constants.GRPC_CPP_MAX_MESSAGE_SIZE
_UNAVAILABLE = 14
# Seconds a GCS may stay silent mid-call (it answers a KV call at once; a stalled one is not
# waited on for the channel's default ten minutes).
READ_TIMEOUT = 120.0
_UNAUTHENTICATED = 16
_RETRIES = 4


def split_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise TransportError(f"{address!r} is not a Ray cluster address",
                             hint="use host:port of the head's GCS (default port 6379), or "
                             "the dashboard URL http://<head>:8265")
    return host.strip("[]") or "127.0.0.1", int(port)


class RayGcsTarget:
    """A Ray cluster reached at its GCS address (see module doc)."""

    pins = True
    layout: ZipLayout = "ray"
    verifies_packages = False

    def __init__(self, address: str, *, env: Mapping[str, str] | None = None,
                 token: str | None = None, channel: Channel | None = None) -> None:
        self._env = dict(os.environ if env is None else env)
        self.address = address
        self.label = f"Ray cluster {address} (GCS)"
        limit = self._env.get("RAY_max_grpc_message_size", "")
        self.max_upload_bytes: int | None = (int(limit) if limit.isdigit() else GRPC_MAX) - 4096
        self._token = token if token is not None else load_token(self._env, to=address)
        self._channel = channel
        self.offenders: dict[str, list[tuple[str, int]]] = {}

    @classmethod
    def connect(cls, address: str, env: Mapping[str, str] | None = None,
                token: str | None = None) -> RayGcsTarget:
        """Connect now; raises NotGrpcError when the address answers HTTP/1 (a dashboard)."""
        target = cls(address, env=env, token=token)
        with contextlib.suppress(GrpcError):  # unreachable: the calls retry, then say so
            target.channel()
        return target

    def channel(self) -> Channel:
        if self._channel is None:
            host, port = split_host_port(self.address)
            meta = [("authorization", f"Bearer {self._token}")] if self._token else []
            self._channel = Channel(host, port, metadata=meta, timeout=READ_TIMEOUT)
        return self._channel

    def _call(self, method: str, message: bytes, *, tail: Path | Buffer | None = None,
              tail_size: int = 0, on_progress: Callable[[int], None] | None = None,
              cancel: Any = None) -> bytes:
        """One call; a broken connection (UNAVAILABLE: the GCS restarting, an idle connection
        closed) is retried on a new one with backoff, the file (or buffer) sent again from its
        start."""
        delay = 0.5
        for attempt in range(_RETRIES):
            try:
                if not isinstance(tail, Path):  # none, or a buffer
                    return self.channel().unary(method, message, tail=tail, tail_size=tail_size,
                                                on_progress=on_progress, cancel=cancel)
                with tail.open("rb") as fh:
                    return self.channel().unary(method, message, tail=fh, tail_size=tail_size,
                                                on_progress=on_progress, cancel=cancel)
            except NotGrpcError as exc:
                raise TransportError(f"{self.address} is not a Ray GCS: it answers HTTP/1",
                                     hint="for a dashboard or an rtenv agent, pass its URL with "
                                     "http://") from exc
            except GrpcError as exc:
                if exc.code != _UNAVAILABLE or attempt == _RETRIES - 1:
                    raise self._error(method, exc, connected=self._channel is not None) from exc
                self.close()
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def call(self, method: str, message: bytes) -> bytes:
        """One unary call of `method` (`/ray.rpc.Service/Method`) with retries (see `_call`);
        the reply's GcsStatus (field 1) checked."""
        reply = self._call(method, message)
        _check_status(reply, 1, self.label)
        return reply

    def _error(self, method: str, exc: GrpcError, *, connected: bool) -> TransportError:
        if not connected:
            return TransportError(f"cannot reach {self.label}: {exc.message}",
                                  hint="check --address / RAY_ADDRESS (the head's GCS, default "
                                  "port 6379) and that the cluster is up")
        if exc.code == _UNAUTHENTICATED:
            return TransportError(f"{self.label} refused the call: {exc.message}",
                                  hint="set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the "
                                  "cluster's token")
        return TransportError(f"{self.label}: {method.rsplit('/', 1)[-1]} failed: {exc.message}",
                              hint="check that the cluster is up (`ray status`)")

    def _pin(self, uri: str, seconds_i: int | None = None) -> None:
        if seconds_i is None:
            seconds = self._env.get("RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S", "")
            seconds_i = int(seconds) if seconds.isdigit() else PIN_SECONDS
        if seconds_i > 0:
            _check_status(self._call(_PIN, field_bytes(1, uri.encode()) +
                                     field_varint(2, seconds_i)), 1, self.label)

    # -- Target -------------------------------------------------------------------------------
    def exists(self, uri: str, *, pin_s: int | None = None) -> bool:
        """Pin `uri` for 10 minutes (or `pin_s`), then ask whether the GCS holds it (the
        dashboard's GET). A package whose pins all expired unreferenced is deleted by the GCS."""
        package_name(uri)  # refuses anything but gcs://
        self._pin(uri, pin_s)
        reply = self._call(_KV + "InternalKVExists", field_bytes(1, uri.encode()))
        _check_status(reply, 1, self.label)
        return any(n == 2 and v for n, v in parse_fields(reply))  # noqa: PLR2004 - `exists`

    def upload(self, uri: str, path: Path, *, on_progress: Callable[[int], None] | None = None,
               cancel: Any = None) -> None:
        """`cancel` (a threading.Event) abandons the upload (TransportError)."""
        package_name(uri)  # refuses anything but gcs://
        path = Path(path)
        size = path.stat().st_size
        if self.max_upload_bytes is not None and size > self.max_upload_bytes:
            raise too_large_error(uri, size, self.max_upload_bytes, self.offenders.get(uri),
                                  self.label)
        # key, overwrite, then the value last so that its bytes can follow from the file
        head = field_bytes(1, uri.encode()) + field_varint(3, 1) + varint(2 << 3 | 2) + varint(size)
        reply = self._call(_KV + "InternalKVPut", head, tail=path, tail_size=size,
                           on_progress=on_progress, cancel=cancel)
        _check_status(reply, 1, self.label)

    def published_uri(self, uri: str) -> str:
        return uri

    def fork(self) -> RayGcsTarget:
        """The same cluster on a connection of its own (one call at a time per connection)."""
        return RayGcsTarget(self.address, env=self._env, token=self._token)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def _check_status(reply: bytes, number: int, label: str) -> None:
    """Raise when the reply's GcsStatus (field `number`) carries a non-zero code."""
    for n, value in parse_fields(reply):
        if n == number and isinstance(value, bytes):
            fields = dict(parse_fields(value))
            code = fields.get(1, 0)
            if code:
                msg = fields.get(2, b"")
                text = msg.decode(errors="replace") if isinstance(msg, bytes) else str(msg)
                raise TransportError(f"{label} answered status {code!r}: {text}")


def probe_auth(address: str, token: str | None, timeout: float = 10.0) -> tuple[bool, bool | None]:
    """(whether the GCS at `address` wants a token, whether `token` is accepted: None when no
    token was given), from one harmless read (InternalKVExists) without and one with it."""
    host, port = split_host_port(address)

    def accepted(meta: list[tuple[str, str]]) -> bool:
        channel = Channel(host, port, metadata=meta, timeout=timeout, connect_timeout=timeout)
        try:
            channel.unary(_KV + "InternalKVExists", field_bytes(1, b"rtenv-doctor-probe"))
            return True
        except GrpcError as exc:
            if exc.code == _UNAUTHENTICATED:
                return False
            raise
        finally:
            channel.close()

    if accepted([]):
        return False, None
    if not token:
        return True, None
    return True, accepted([("authorization", f"Bearer {token}")])

"""The h2 gRPC channel against servers that are not (or stop being) a gRPC server.

The happy path runs against a real Ray GCS in test_ray_gcs.py; these are loopback sockets that
answer what a wrong port or a dying server would.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from rtenv_cli.core.transport.grpc_unary import Channel, GrpcError, NotGrpcError

EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an HTTP/2 SETTINGS frame, no values


@contextmanager
def server(answer: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback server that runs `answer` on each accepted connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # accept() is not woken by close(): poll a stop flag instead
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(10)
            with conn:
                conn.recv(65536)  # the client's preface and settings
                answer(conn)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=10)
        listener.close()


def test_an_http1_server_is_not_grpc() -> None:
    with server(lambda c: c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                ) as port, pytest.raises(NotGrpcError):
        Channel("127.0.0.1", port)


def test_a_server_that_closes_at_once_is_not_grpc() -> None:
    with server(lambda c: None) as port, pytest.raises(NotGrpcError):
        Channel("127.0.0.1", port)


def test_a_server_that_dies_mid_call_is_unavailable() -> None:
    def settings_then_close(conn: socket.socket) -> None:
        conn.sendall(EMPTY_SETTINGS)
        conn.recv(65536)  # the client's SETTINGS ACK and the call's first frames

    with server(settings_then_close) as port:
        channel = Channel("127.0.0.1", port, timeout=10)
        with pytest.raises(GrpcError) as info:
            channel.unary("/ray.rpc.InternalKVGcsService/InternalKVExists", b"\x0a\x01x")
        assert info.value.code == 14  # UNAVAILABLE: the caller may retry on a new connection
        channel.close()

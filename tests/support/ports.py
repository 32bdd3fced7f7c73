"""Free loopback ports."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """n distinct free ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def wait_for_port(port: int, timeout: float = 30.0, host: str = "127.0.0.1") -> None:
    from tests.support.wait import until

    def accepts() -> bool:
        with socket.create_connection((host, port), timeout=0.5):
            return True

    until(accepts, what=f"a listener on {host}:{port}", timeout=timeout, interval=0.1,
          retry_on=(OSError,))

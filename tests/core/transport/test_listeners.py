"""Who owns a listening port: sock_diag and the /proc tables agree, and both see this user's
listeners on the addresses a loopback connection may land on."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from rtenv_cli.core.transport import listeners


@pytest.fixture
def mine() -> Iterator[tuple[int, int]]:
    """This user's listeners: one on 127.0.0.1, one dual-stack on [::]."""
    v4 = socket.socket()
    v4.bind(("127.0.0.1", 0))
    v4.listen()
    v6 = socket.socket(socket.AF_INET6)
    v6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    v6.bind(("::", 0))
    v6.listen()
    with v4, v6:
        yield v4.getsockname()[1], v6.getsockname()[1]


def _answers(mine: tuple[int, int]) -> dict[str, set[int] | None]:
    v4, dual = mine
    return {f"{host} {port}": listeners.listener_uids(host, port)
            for host in ("127.0.0.1", "localhost", "[::1]", "127.0.0.2") for port in (v4, dual)}


def test_this_users_listeners_are_found_where_a_connection_lands(mine: tuple[int, int]) -> None:
    v4, dual = mine
    me = {os.geteuid()}
    assert _answers(mine) == {
        f"127.0.0.1 {v4}": me, f"localhost {v4}": me, f"[::1] {v4}": set(),
        f"127.0.0.2 {v4}": set(),  # another loopback address: not that listener's
        f"127.0.0.1 {dual}": me, f"localhost {dual}": me, f"[::1] {dual}": me,
        f"127.0.0.2 {dual}": me,
    }


def test_the_proc_tables_answer_as_sock_diag_does(mine: tuple[int, int],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    if listeners._tables() is None:
        pytest.skip("no /proc/net/tcp here (not Linux)")

    def key(rows: list[tuple[listeners.Address, int, int]] | None) -> list[tuple[str, int, int]]:
        # this test's own listeners only: other processes of a shared machine open and close
        # theirs between the two reads
        return sorted((str(a), p, u) for a, p, u in rows or [] if p in mine)

    try:
        diag = listeners._diag(socket.AF_INET) + listeners._diag(socket.AF_INET6)
    except OSError as exc:
        pytest.skip(f"no sock_diag here ({exc}): the tables are the only source")
    assert len(key(diag)) == 2  # the two listeners of `mine`
    assert key(diag) == key(listeners._tables())
    via_diag = _answers(mine)

    def no_netlink(family: int) -> list[tuple[listeners.Address, int, int]]:
        raise PermissionError("netlink refused")  # a seccomp filter, say

    monkeypatch.setattr(listeners, "_diag", no_netlink)
    assert _answers(mine) == via_diag

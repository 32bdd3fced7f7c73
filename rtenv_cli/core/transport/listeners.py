"""Who listens on a TCP port of this machine: the owner (uid) of each listening socket that could
take a connection to a loopback address. The kernel records the uid of the process that made
each socket; nothing here needs privileges or another process's cooperation.

Read from Linux's socket diagnostics (netlink `SOCK_DIAG_BY_FAMILY`, as `ss -ltn` does: only
the listening table is walked), else from /proc/net/tcp and /proc/net/tcp6 (their LISTEN rows
carry the uid; the kernel walks every connection to print them, slower the more connections:
benchmarks/results/fastpaths.json: "find the owners of listening sockets (sock_diag)" and the
row after it). Both parsed by hand: psutil's `net_connections` reads the /proc tables, at the price
of a dependency for less.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import sys
from pathlib import Path

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LISTEN = 10  # the kernel's TCP_LISTEN state (printed "0A" in the tables)
_WILDCARDS = (ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::"))  # noqa: S104 - matched, not bound
# linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST_DUMP = 0x301
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQ = struct.Struct("=BBBBI48x")  # inet_diag_req_v2: family, protocol, ext, pad, states, id
_UID_AT = 64  # inet_diag_msg: family state timer retrans, id (48 bytes), expires rqueue wqueue, uid


def _unmapped(addr: Address) -> Address:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _diag(family: int) -> list[tuple[Address, int, int]]:
    """(address, port, uid) of each listening TCP socket of `family`, from sock_diag."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(5)
        req = _REQ.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << _LISTEN)
        nl.sendto(_NLMSG.pack(_NLMSG.size + len(req), _SOCK_DIAG_BY_FAMILY,
                              _NLM_F_REQUEST_DUMP, 1, 0) + req, (0, 0))
        found: list[tuple[Address, int, int]] = []
        while True:
            data = nl.recv(1 << 16)
            off = 0
            while off + _NLMSG.size <= len(data):
                length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, off)
                if kind == _NLMSG_DONE:
                    return found
                if kind == _NLMSG_ERROR or length < _NLMSG.size + _UID_AT + 4:
                    raise OSError(f"sock_diag answered message type {kind}")
                msg = data[off + _NLMSG.size:off + length]
                size = 4 if msg[0] == socket.AF_INET else 16
                (port,) = struct.unpack_from(">H", msg, 4)
                (uid,) = struct.unpack_from("=I", msg, _UID_AT)
                found.append((_unmapped(ipaddress.ip_address(msg[8:8 + size])), port, uid))
                off += (length + 3) & ~3
            if not data:
                raise OSError("sock_diag ended its answer early")


def _table_address(hex_addr: str) -> Address:
    """A /proc table's address: 32-bit words in the host's byte order."""
    raw = bytes.fromhex(hex_addr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return _unmapped(ipaddress.ip_address(raw))


def _tables() -> list[tuple[Address, int, int]] | None:
    """The same from /proc/net/tcp{,6}; None where neither can be read."""
    found: list[tuple[Address, int, int]] = []
    read = False
    for table in _TABLES:
        try:
            text = table.read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        read = True
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 8 or fields[3] != f"{_LISTEN:02X}":  # noqa: PLR2004 - the uid's column
                continue
            addr, _, port = fields[1].rpartition(":")
            with contextlib.suppress(ValueError):
                found.append((_table_address(addr), int(port, 16), int(fields[7])))
    return found if read else None


def _listening() -> list[tuple[Address, int, int]] | None:
    if hasattr(socket, "AF_NETLINK"):
        try:
            return _diag(socket.AF_INET) + _diag(socket.AF_INET6)
        except OSError:  # no sock_diag here (a seccomp filter, an old kernel): the tables
            pass
    return _tables()


def _targets(host: str, port: int) -> set[Address]:
    """The addresses a connection to host:port may go to (`localhost` may name both families)."""
    try:
        return {_unmapped(ipaddress.ip_address(host))}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {_unmapped(ipaddress.ip_address(str(info[4][0]).split("%")[0])) for info in infos}


def listener_uids(host: str, port: int) -> set[int] | None:
    """The uids of the sockets listening where a connection to host:port lands (that address or
    a wildcard, either family): empty when nothing listens, None where this system does not
    show them (not Linux)."""
    listening = _listening()
    if listening is None:
        return None
    targets = _targets(host.strip("[]"), port) | set(_WILDCARDS)
    return {uid for addr, p, uid in listening if p == port and addr in targets}

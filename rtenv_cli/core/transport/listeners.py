"""Who listens on a TCP port of this machine: the owner (uid) of each listening socket that could
take a connection to a loopback address, read from the kernel's socket tables (Linux
/proc/net/tcp and /proc/net/tcp6: a LISTEN row carries its socket's uid, that of the process
that made it). Nothing here needs privileges or another process's cooperation.

Parsed by hand: psutil would do it too (`net_connections`), at the price of a dependency for
two small text tables.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_LISTEN = "0A"  # the kernel's TCP_LISTEN state, as the tables print it
_WILDCARDS = (ipaddress.ip_address("0.0.0.0"), ipaddress.ip_address("::"))  # noqa: S104 - matched, not bound


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A table's address: 32-bit words in the host's byte order (little-endian on x86/arm)."""
    raw = bytes.fromhex(hex_addr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    addr = ipaddress.ip_address(raw)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _targets(host: str, port: int) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses a connection to host:port may go to (`localhost` may name both families)."""
    try:
        return {ipaddress.ip_address(host)}
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return set()
    return {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos}


def listener_uids(host: str, port: int) -> set[int] | None:
    """The uids of the sockets listening where a connection to host:port lands (that address or
    a wildcard, either family): empty when nothing listens, None where the tables cannot be read
    (not Linux)."""
    targets = _targets(host.strip("[]"), port) | set(_WILDCARDS)
    uids: set[int] = set()
    found = False
    for table in _TABLES:
        try:
            text = table.read_text(encoding="ascii", errors="replace")
        except OSError:
            continue
        found = True
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 8 or fields[3] != _LISTEN:  # noqa: PLR2004 - the uid's column
                continue
            addr, _, port_hex = fields[1].rpartition(":")
            try:
                if int(port_hex, 16) != port or _address(addr) not in targets:
                    continue
                uids.add(int(fields[7]))
            except ValueError:
                continue
    return uids if found else None

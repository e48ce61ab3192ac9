"""Binding the gRPC port: one server per address unless sharing is asked for.

gRPC sets ``SO_REUSEPORT`` on its listening sockets by default. A second server
started on an address another one holds then starts silently, and the kernel splits
new connections between the two (possibly on two different databases). UNS turns the
option off unless ``reuse_port`` is set, so the second bind fails, and explains the
failure, which gRPC reports only as "Failed to bind".
"""

from __future__ import annotations

import errno
import socket


def reuse_port_option(reuse_port: bool) -> tuple[str, int]:
    """The grpc server option for ``SO_REUSEPORT``."""
    return ("grpc.so_reuseport", 1 if reuse_port else 0)


def bind_failure(listen: str, *, reuse_port: bool) -> str:
    """Why gRPC could not bind ``listen`` (HOST:PORT), found by binding it ourselves."""
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(
            host or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, ValueError) as exc:
        return f"cannot listen on {listen}: cannot resolve it ({exc})"
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port and hasattr(socket, "SO_REUSEPORT"):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                change = "a free address with --listen (UNS_LISTEN)"
                if exc.errno == errno.EADDRINUSE:
                    hint = (
                        f"another process holds it without SO_REUSEPORT; choose {change}"
                        if reuse_port
                        else f"is another uns-server running there? Choose {change}, "
                        "or, to run several processes on one port on purpose, start every "
                        "one of them with --reuse-port (UNS_REUSE_PORT=true)"
                    )
                    return f"cannot listen on {listen}: the address is already in use ({hint})"
                return f"cannot listen on {listen}: {exc.strerror or exc} (choose {change})"
    return f"cannot listen on {listen} (choose another address with --listen)"

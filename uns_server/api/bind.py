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


class Reservation:
    """An address held for the children of one ``uns-server --processes N``: bound
    sockets with ``SO_REUSEPORT`` that never listen. The children (all ``SO_REUSEPORT``)
    bind beside them; a process that does not ask to share cannot, even while every
    child is down for a restart; and ``HOST:0`` becomes one port for all children."""

    def __init__(self, address: str, sockets: list[socket.socket]) -> None:
        self.address = address  # HOST:PORT, the port as bound
        self._sockets = sockets

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets = []


def reserve(listen: str, *, join: bool, flag: str, what: str = "") -> Reservation:
    """Hold ``listen`` (HOST:PORT) for a supervisor's children. Unless ``join`` (the
    user's ``--reuse-port``: sharing with other processes is wanted), an address that
    any process holds already is refused, with the reason and ``flag`` to change, as a
    single server's bind is (``ReservationError``, whose text says how to fix it)."""
    host, _, port = listen.rpartition(":")
    for_what = f" for {what}" if what else ""
    try:
        infos = socket.getaddrinfo(
            host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, ValueError) as exc:
        message = f"cannot listen on {listen}{for_what}: cannot resolve it ({exc})"
        raise ReservationError(message) from exc
    held: list[socket.socket] = []
    bound = int(port)
    try:
        for family, kind, proto, _name, address in infos:
            address = (address[0], bound, *address[2:])
            if not join and bound:
                _probe(family, kind, proto, address, listen, for_what, flag)
            sock = socket.socket(family, kind, proto)
            held.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                raise ReservationError(_refusal(listen, for_what, flag, exc, join=True)) from exc
            bound = sock.getsockname()[1]
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return Reservation(f"{host}:{bound}", held)


class ReservationError(ValueError):
    """The address cannot be held; the message says why and which flag to change."""


def _probe(
    family: int, kind: int, proto: int, address: tuple[object, ...], listen: str,
    for_what: str, flag: str,
) -> None:  # fmt: skip
    """Bind without ``SO_REUSEPORT``: fails while anyone at all holds the address."""
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise ReservationError(_refusal(listen, for_what, flag, exc, join=False)) from exc


def _refusal(listen: str, for_what: str, flag: str, exc: OSError, *, join: bool) -> str:
    change = f"a free address with {flag}"
    if exc.errno != errno.EADDRINUSE:
        return f"cannot listen on {listen}{for_what}: {exc.strerror or exc} (choose {change})"
    hint = (
        f"another process holds it without SO_REUSEPORT; choose {change}"
        if join
        else f"is another uns-server running there? Choose {change}, or, to share it with "
        "other processes on purpose, start every one of them with --reuse-port "
        "(UNS_REUSE_PORT=true)"
    )
    return f"cannot listen on {listen}{for_what}: the address is already in use ({hint})"

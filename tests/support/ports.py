"""Loopback ports for tests."""

from __future__ import annotations

import socket


def closed_port() -> int:
    """A loopback port nothing listens on (bound once, then released): a channel
    pointed at it fails at once with a refused connection."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

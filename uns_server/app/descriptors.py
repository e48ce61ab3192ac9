"""The process's file descriptors: raised to the hard limit at start, and the
server-wide connection cap sized below it, so a flood of client connections can never
take the descriptors the database pool, the LISTEN connection, the providers' HTTP
clients, log files and health checks need (docs/deployment.md, "Connections and file
descriptors")."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("uns.server")

# Descriptors kept for everything but client connections: the PostgreSQL pool (20),
# LISTEN and the kept event reader, SQLite's files, the providers' HTTP connections
# (dispatch_concurrency and their keep-alive pools), the listeners, the metrics
# endpoint, logs, and grpc's own (epoll, wake-up pipes).
RESERVED_DESCRIPTORS = 512
# Each listener holds at most ``max_connections``: a relayed gRPC connection takes
# three descriptors (the client's, the relay's and gRPC's end of it), an HTTP one one.
DESCRIPTORS_PER_CONNECTION = 3 + 1
MIN_CONNECTIONS = 16


def raise_limit() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard limit (no privilege needed); the soft
    limit now in force."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 0
    if hard != resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (OSError, ValueError) as exc:
            log.warning("cannot raise the open-file limit", extra={"error": str(exc)})
    return int(soft) if soft != resource.RLIM_INFINITY else 1 << 20


def connection_cap(configured: int, limit: int) -> int:
    """Each listener's cap on client connections: ``configured``, or (0) the most
    the descriptor ``limit`` allows both listeners after the reserve. A configured cap
    above that is kept, with a warning: the operator may know better, but the flood
    protection is then theirs to size."""
    fits = max(MIN_CONNECTIONS, (limit - RESERVED_DESCRIPTORS) // DESCRIPTORS_PER_CONNECTION)
    if configured <= 0:
        return fits
    if configured > fits:
        log.warning(
            "max_connections is above what the open-file limit leaves for connections",
            extra={"max_connections": configured, "open_file_limit": limit, "fits": fits},
        )
    return configured

"""gRPC health (``grpc.health.v1``): NOT_SERVING until ready, then following the
database and the workers.

The monitor pings the database every ``HEALTH_CHECK_SECONDS`` and listens to
``Supervision`` (repeated failed rounds of a required worker: dispatch, ack expiry,
follow-ups, message updates; reported by the shared loop, ``workers.loop``, as they
happen) and to the database's storage (``store.space``: writes failing because the
disk is full, reported by the first such write; while it lasts, each check asks
whether space was freed): any of them turns health NOT_SERVING until it recovers.
"""

from __future__ import annotations

import asyncio
import logging

from grpc_health.v1 import health, health_pb2

from uns_server.aio import wait_event
from uns_server.store.db import Database
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.server")

HEALTH_CHECK_SECONDS = 5.0
NOTIFICATION_SERVICE = "uns.v1.NotificationService"


class HealthMonitor:
    def __init__(self, db: Database, supervision: Supervision) -> None:
        self.servicer = health.aio.HealthServicer()
        self._db = db
        self._supervision = supervision
        # A full disk is reported as it happens, like a worker's faults.
        db.space.listeners.append(supervision.changed.set)

    async def set(self, *, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", NOTIFICATION_SERVICE):
            await self.servicer.set(name, status)

    async def run(self) -> None:
        """Health follows the database (a ``SELECT 1`` every HEALTH_CHECK_SECONDS) and
        the required workers (``Supervision``, reported as they happen)."""
        serving = reachable = True
        changed = self._supervision.changed
        while True:
            if not await wait_event(changed, HEALTH_CHECK_SECONDS):
                was = reachable
                try:
                    async with asyncio.timeout(HEALTH_CHECK_SECONDS):
                        await self._db.ping()
                    reachable = True
                except Exception:
                    reachable = False
                if reachable != was:
                    log.warning("database %s", "reachable again" if reachable else "unreachable")
                if reachable and self._db.space.full:
                    try:
                        async with asyncio.timeout(HEALTH_CHECK_SECONDS):
                            await self._db.check_room()
                    except Exception:
                        log.debug("storage room check failed", exc_info=True)
            changed.clear()
            failing = self._supervision.unhealthy
            if self._db.space.full:
                failing = (*failing, "storage_full")
            ok = reachable and not failing
            if ok != serving:
                serving = ok
                await self.set(serving=ok)
                log.warning(
                    "health %s", "SERVING" if ok else "NOT_SERVING", extra={"failing": failing}
                )

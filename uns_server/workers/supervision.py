"""Supervised consumers: repeated storage faults make a worker unhealthy (seed 004).

The shared worker loop (``workers.loop``) survives a failed round (it logs it and
tries again at the next poll), which is right for a blip but hides a lasting fault: a
replica whose workers cannot touch their tables while ``SELECT 1`` still answers
would stay SERVING and take traffic it cannot serve. So the loop reports every round
of a ``required`` worker (dispatch, expiry, follow-ups, message updates, heartbeats) here; a
worker whose last ``FAULTS_BEFORE_UNHEALTHY`` rounds all failed is unhealthy until
one succeeds, and health (``app``) answers NOT_SERVING meanwhile.

    healthy --FAULTS_BEFORE_UNHEALTHY failures in a row--> unhealthy
    unhealthy --one success--> healthy
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("uns.supervision")

# One failure is a blip (a connection dropped, a failover); three in a row, a poll
# interval or more apart, is a fault worth taking the replica out of rotation for.
FAULTS_BEFORE_UNHEALTHY = 3


class Supervision:
    """Consecutive storage faults, by worker name."""

    def __init__(self, threshold: int = FAULTS_BEFORE_UNHEALTHY) -> None:
        self._threshold = threshold
        self._faults: dict[str, int] = {}
        # Set whenever a worker becomes unhealthy or recovers.
        self.changed = asyncio.Event()

    @property
    def unhealthy(self) -> tuple[str, ...]:
        """The workers whose recent rounds all failed, by name."""
        return tuple(sorted(w for w, n in self._faults.items() if n >= self._threshold))

    def succeeded(self, worker: str) -> None:
        if self._faults.pop(worker, 0) >= self._threshold:
            log.warning("storage faults over", extra={"worker": worker})
            self.changed.set()

    def failed(self, worker: str) -> None:
        faults = self._faults.get(worker, 0) + 1
        self._faults[worker] = faults
        if faults == self._threshold:
            log.error(
                "repeated storage faults: reporting NOT_SERVING until they stop",
                extra={"worker": worker, "faults": faults},
            )
            self.changed.set()

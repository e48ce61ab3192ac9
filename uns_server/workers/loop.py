"""One worker shape: each background worker is a round, ``run_once()``, and this module
runs every one of them the same way.

``run_loop`` owns what the rounds share: stopping between rounds (never inside one: a
cancelled transaction can leave SQLite's write lock held), running again at once after a
full batch, sleeping until the next known due time, the poll interval or a wake-up
(LISTEN/NOTIFY or an in-process commit), logging a failed round once per outage, and
reporting every round of a ``required`` worker to ``Supervision`` so that a lasting fault
turns health NOT_SERVING (``app.health``). ``LoopWorker`` is the start/stop half
(``run``, ``stop``, ``wake``) the workers inherit; each keeps only its round.

    round ok, more       -> next round at once
    round ok             -> sleep until min(due_in, poll) or a wake-up
    round raised         -> Supervision.failed (required workers), sleep the poll
    stop()               -> the current round finishes, then ``run`` returns
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Protocol

from uns_server.aio import wait_event
from uns_server.workers.supervision import Supervision

log = logging.getLogger("uns.workers")


class RoundResult(Protocol):
    """What the loop needs to know about a round (each worker's result type adds its
    own counts, which tests and logs read)."""

    @property
    def more(self) -> bool:
        """A full batch: more work may be due right now, run again at once."""
        ...

    @property
    def due_in(self) -> float | None:
        """Seconds until the next work this round knows of (None: only the poll or a
        wake-up will tell)."""
        ...


@dataclass(frozen=True)
class Round:
    """A round with nothing to report but what the loop needs."""

    more: bool = False
    due_in: float | None = None


def seconds_until(due: datetime | None, now: datetime) -> float | None:
    """``due`` as a ``RoundResult.due_in`` (0 when it has passed)."""
    return None if due is None else max(0.0, (due - now).total_seconds())


class Worker(Protocol):
    @property
    def name(self) -> str:
        """Its name in logs and in ``Supervision``."""
        ...

    @property
    def required(self) -> bool:
        """Does a lasting failure of its rounds make the server unhealthy?"""
        ...

    async def run_once(self) -> RoundResult: ...


async def run_loop(
    worker: Worker,
    *,
    stop: asyncio.Event,
    wake: asyncio.Event,
    poll_seconds: float,
    supervision: Supervision | None = None,
) -> None:
    """Run ``worker``'s rounds until ``stop`` is set (whoever sets it also sets ``wake``,
    which ends the sleep). A round that raises is logged and retried at the next poll,
    never the end of the loop; only cancellation ends it otherwise."""
    failures = 0
    report = supervision is not None and worker.required
    while not stop.is_set():
        wake.clear()  # a wake-up during the round runs the next round at once
        timeout = poll_seconds
        try:
            result = await worker.run_once()
        except Exception:
            failures += 1
            if report:
                assert supervision is not None
                supervision.failed(worker.name)
            if failures == 1:  # once per outage, not every poll
                log.exception(
                    "worker round failed; retrying at every poll", extra={"worker": worker.name}
                )
        else:
            if failures:
                log.warning(
                    "worker rounds succeed again",
                    extra={"worker": worker.name, "failed_rounds": failures},
                )
                failures = 0
            if report:
                assert supervision is not None
                supervision.succeeded(worker.name)
            if result.more:
                continue
            if result.due_in is not None:
                timeout = min(timeout, result.due_in)
        await wait_event(wake, timeout)


class LoopWorker:
    """The start/stop half every worker shares (River's maintenance services share one
    too): ``run`` the shared loop, ``wake`` for a round now, ``stop`` after the current
    round. Subclasses set ``name`` and ``required`` and write ``run_once``."""

    name: ClassVar[str]
    required: ClassVar[bool] = True

    def __init__(self, poll_seconds: float, supervision: Supervision | None = None) -> None:
        self._poll = poll_seconds
        self._supervision = supervision
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    async def run_once(self) -> RoundResult:
        raise NotImplementedError

    def wake(self) -> None:
        """Work may be due: run a round at the next chance."""
        self._wake.set()

    def stop(self) -> None:
        """Finish the current round, then return from ``run``."""
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        await run_loop(
            self,
            stop=self._stopping,
            wake=self._wake,
            poll_seconds=self._poll,
            supervision=self._supervision,
        )

"""The heartbeats' deadlines: due ``heartbeat_deadline`` jobs decided and paged
(``domain.heartbeats``), in the transaction of a timers round (``workers.timers``).

The round claims due jobs, locks their heartbeats, asks ``domain.heartbeats.decide``
for each, sends the pages through ``Intake.send_in`` (the heartbeat's policy, dedup and
channels, as any send) and completes every job in one fenced settle, all in one commit:
a page is sent exactly when its heartbeat turns PAGING and its job completes, so a
replica or a restart never pages twice for one silence (and the idempotency key,
``heartbeat:<id>:<last beat>``, would answer a second send with the first). A page the
intake refuses (no policy and no default channels, a type the policy does not let the
heartbeat send) is recorded on the heartbeat (``page_error``) and tried again a minute
later by a new job.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from uns_server.domain import heartbeats
from uns_server.domain.errors import UnsError
from uns_server.domain.records import Job
from uns_server.services.intake import Intake
from uns_server.store.port import WriteTransaction

log = logging.getLogger("uns.heartbeats")


@dataclass(frozen=True)
class DeadlineRound:
    """``paged``: heartbeats that turned PAGING; ``refused``: pages the intake refused
    (retried later); ``rearmed``: deadlines a beat had moved."""

    paged: int = 0
    refused: int = 0
    rearmed: int = 0


class HeartbeatDeadlines:
    def __init__(self, intake: Intake) -> None:
        self._intake = intake

    async def fire(self, tx: WriteTransaction, jobs: Sequence[Job], now: datetime) -> DeadlineRound:
        """The due ``heartbeat_deadline`` jobs of a timers round (``workers.timers``,
        which claimed them in ``tx`` and completes them)."""
        paged = refused = rearmed = 0
        rows = dict(await tx.heartbeats.locked({_id_of(job.args) for job in jobs}))
        for job in jobs:
            hid = _id_of(job.args)
            decision = heartbeats.decide(job, rows.get(hid), now)
            if isinstance(decision, heartbeats.Stale):
                continue
            row = rows[hid]
            if isinstance(decision, heartbeats.Rearm):
                rows[hid] = await _arm(tx, row, decision.at, "", now)
                rearmed += 1
                continue
            try:
                sent = await self._intake.send_in(tx, decision.principal, decision.request, now)
            except UnsError as exc:
                log.warning(
                    "heartbeat page refused; trying again",
                    extra={"heartbeat_id": hid, "reason": exc.reason, "error": exc.message},
                )
                error = heartbeats.page_error(exc)
                rows[hid] = await _arm(tx, row, now + heartbeats.PAGE_RETRY, error, now)
                refused += 1
                continue
            await tx.heartbeats.record_page(
                hid, paging=True, notification_id=sent.notification_id, page_error="", job_id=None
            )
            rows[hid] = replace(row, paging=True, notification_id=sent.notification_id)
            log.info(
                "heartbeat silent: paged",
                extra={"heartbeat_id": hid, "notification_id": sent.notification_id},
            )
            paged += 1
        return DeadlineRound(paged, refused, rearmed)


async def _arm(
    tx: WriteTransaction, row: heartbeats.Heartbeat, at: datetime, error: str, now: datetime
) -> heartbeats.Heartbeat:
    """The heartbeat's next deadline job, due ``at``, named by its row."""
    job_id = await tx.heartbeats.insert_timer(heartbeats.timer(row.heartbeat_id, at), now)
    await tx.heartbeats.record_page(
        row.heartbeat_id,
        paging=False,
        notification_id=row.notification_id,
        page_error=error,
        job_id=job_id,
    )
    return replace(row, job_id=job_id, page_error=error)


def _id_of(args: Mapping[str, Any]) -> str:
    value = args.get("heartbeat_id")
    return value if isinstance(value, str) else ""

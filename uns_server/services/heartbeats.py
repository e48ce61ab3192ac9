"""Managing heartbeats and taking their beats: the one implementation behind
``uns.v1.HeartbeatService`` (and ``POST /heartbeats/{id}``, through it) and
``uns-admin heartbeats``.

Put and Delete write an audit record with the operator in the same transaction, and
keep one live ``heartbeat_deadline`` job per heartbeat (``domain.heartbeats``): a put
that changes the timing cancels the old job and inserts the new one in its commit. A
waiting job is cancelled before the heartbeat row is locked, the order the deadline
round takes them in (job, then row), so the two never deadlock; a job the round holds
meanwhile completes stale. A beat is one UPDATE; while paging, the same commit
withdraws the page (``heartbeat resumed``, as the heartbeat's principal, through
``services.withdrawal``) and re-arms.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from uns_server.domain import paging
from uns_server.domain.enums import Role
from uns_server.domain.errors import InvalidRequest, NotFound, NotWithdrawable
from uns_server.domain.heartbeats import (
    RESUMED_REASON,
    Heartbeat,
    armed,
    needs_timer,
    timer,
)
from uns_server.domain.people import check_id
from uns_server.services.auth import Principal
from uns_server.services.withdrawal import Withdrawals
from uns_server.store.port import Store, WriteTransaction

Clock = Callable[[], datetime]

# Signalled by a commit that inserts a deadline job: the local worker looks again at
# once (other replicas find it at their next poll).
TOPIC_HEARTBEATS = "uns_heartbeats"
_TOKEN_VERSION = 1
_TOKEN_KIND = "heartbeats"
_PUT_RETRIES = 3


def _not_found(heartbeat_id: str) -> NotFound:
    return NotFound(f"no heartbeat {heartbeat_id}", metadata={"heartbeat_id": heartbeat_id})


def _decode(token: str) -> str | None:
    if not token:
        return None
    try:
        version, kind, last = paging.decode_token(token, 3)
        if version != _TOKEN_VERSION or kind != _TOKEN_KIND or not isinstance(last, str):
            raise ValueError(token)
    except ValueError:
        raise InvalidRequest.of_field("page_token", "not a token from this server") from None
    return last


class HeartbeatService:
    def __init__(self, store: Store, clock: Clock, withdrawals: Withdrawals | None = None) -> None:
        """``withdrawals``: what a beat ends a page with (the server's; ``uns-admin``
        on the database only puts, reads and deletes)."""
        self._store = store
        self._clock = clock
        self._withdrawals = withdrawals

    async def put(self, actor: str, heartbeat: Heartbeat) -> Heartbeat:
        for attempt in range(_PUT_RETRIES):
            try:
                async with self._store.write() as tx:
                    return await self._put(tx, actor, heartbeat, self._clock())
            except Exception as exc:  # a concurrent first put of the id won: update it
                if not self._store.is_lost_race(exc) or attempt == _PUT_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def _put(
        self, tx: WriteTransaction, actor: str, heartbeat: Heartbeat, now: datetime
    ) -> Heartbeat:
        hid = heartbeat.heartbeat_id
        seen = await tx.heartbeats.get(hid)  # not locked: the job first (module doc)
        timing_changes = seen is not None and needs_timer(armed(heartbeat, seen, now), seen)
        if seen is not None and seen.job_id is not None and timing_changes:
            await tx.heartbeats.cancel_timer(seen.job_id, now)
        old = (await tx.heartbeats.locked({hid})).get(hid)
        row = armed(heartbeat, old, now)
        if needs_timer(row, old):
            assert row.deadline is not None
            job_id = await tx.heartbeats.insert_timer(timer(hid, row.deadline), now)
            row = replace(row, job_id=job_id)
            tx.signal(TOPIC_HEARTBEATS)
        return await tx.heartbeats.put(row, actor=actor, now=now)

    async def get(self, heartbeat_id: str) -> Heartbeat:
        check_id(heartbeat_id, "heartbeat_id")
        async with self._store.read() as tx:
            found = await tx.heartbeats.get(heartbeat_id)
        if found is None:
            raise _not_found(heartbeat_id)
        return found

    async def list(self, page_size: int = 0, page_token: str = "") -> tuple[list[Heartbeat], str]:
        limit = paging.page_limit(page_size)
        after = _decode(page_token)
        async with self._store.read() as tx:
            rows = list(await tx.heartbeats.list_heartbeats(after=after, limit=limit + 1))
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        token = paging.encode_token(_TOKEN_VERSION, _TOKEN_KIND, rows[-1].heartbeat_id)
        return rows, token

    async def delete(self, actor: str, heartbeat_id: str) -> Heartbeat:
        check_id(heartbeat_id, "heartbeat_id")
        now = self._clock()
        async with self._store.write() as tx:
            seen = await tx.heartbeats.get(heartbeat_id)
            if seen is not None and seen.job_id is not None:
                await tx.heartbeats.cancel_timer(seen.job_id, now)
            found = (await tx.heartbeats.locked({heartbeat_id})).get(heartbeat_id)
            if found is None:
                raise _not_found(heartbeat_id)
            await tx.heartbeats.delete(found, actor=actor, now=now)
            return found

    async def beat(self, heartbeat_id: str) -> Heartbeat:
        """The heartbeat after the beat: its deadline moved to now + interval + grace;
        a page it raised withdrawn, and its deadline job inserted again."""
        check_id(heartbeat_id, "heartbeat_id")
        now = self._clock()
        async with self._store.write() as tx:
            row = await tx.heartbeats.beat(heartbeat_id, now)
            if row is None:
                raise _not_found(heartbeat_id)
            if not row.paging:
                return row
            await self._end_page(tx, row, now)
            deadline = row.basis + row.interval + row.grace
            job_id = await tx.heartbeats.insert_timer(timer(heartbeat_id, deadline), now)
            tx.signal(TOPIC_HEARTBEATS)
            await tx.heartbeats.record_page(
                heartbeat_id,
                paging=False,
                notification_id=row.notification_id,
                page_error="",
                job_id=job_id,
            )
            return replace(row, paging=False, page_error="", job_id=job_id)

    async def _end_page(self, tx: WriteTransaction, row: Heartbeat, now: datetime) -> None:
        """Withdraw the page, as the principal that sent it. One that can no longer be
        withdrawn (answered, timed out, withdrawn by an operator) is left as it is."""
        if row.notification_id is None or self._withdrawals is None:
            return
        sender = Principal(row.principal, frozenset({Role.PRODUCER}))
        with contextlib.suppress(NotFound, NotWithdrawable):
            await self._withdrawals.withdraw_in(
                tx, sender, row.notification_id, RESUMED_REASON, now
            )

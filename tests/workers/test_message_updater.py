"""The message-update worker over a store (both dialects) and a fake channel: a job
whose worker died is rescued (``workers.rescuer``) and sent, or given up when that was
its last attempt;
transient failures are retried with backoff until the attempts are spent."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from uns_server.channels.base import ChannelResult, ObligationOutcome
from uns_server.channels.registry import ChannelRegistry
from uns_server.domain.jobs import JobKind, JobState
from uns_server.domain.message_updates import MessageUpdate
from uns_server.store.sql_store import SqlStore
from uns_server.store.tables import jobs
from uns_server.workers.message_updates import MessageUpdater
from uns_server.workers.rescuer import JobRescuer

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)
OUTCOME = {
    "state": "ACKED",
    "actor": "rita",
    "via": "grpc",
    "at": NOW.isoformat(),
    "title": "Disk almost full",
    "message": "92% used",
}


class FakeChannel:
    name = "fake"

    def __init__(self) -> None:
        self.updates: list[Mapping[str, Any]] = []
        self.answer = ChannelResult.delivered("ok")

    async def send(self, message: Any) -> ChannelResult:
        raise AssertionError("only updates here")

    async def update(
        self, reference: Mapping[str, str], settlement: ObligationOutcome
    ) -> ChannelResult:
        self.updates.append(reference)
        return self.answer

    async def aclose(self) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


async def queue(store: SqlStore, *, max_attempts: int | None = None) -> None:
    new = MessageUpdate("n1", "fake", {"ts": "1.2"}, OUTCOME).job()
    if max_attempts is not None:
        new = dataclasses.replace(new, max_attempts=max_attempts)
    async with store.write() as tx:
        await tx.jobs.insert_many([new], NOW)


async def die_holding_a_lease(store: SqlStore) -> None:
    """Another worker claims the job, then dies before it settles."""
    async with store.write() as tx:
        assert len(await tx.jobs.claim([JobKind.MESSAGE_UPDATE], now=NOW, limit=9, lease=LEASE))


async def states(store: SqlStore) -> list[tuple[str, int]]:
    async with store.db.read() as conn:
        return [tuple(r) for r in (await conn.execute(select(jobs.c.state, jobs.c.attempt)))]


def updater(store: SqlStore, channel: FakeChannel, clock: Clock) -> MessageUpdater:
    registry = ChannelRegistry({"fake": channel})  # type: ignore[dict-item]
    return MessageUpdater(
        store, registry, clock, lease_seconds=LEASE.total_seconds(), idle_poll_seconds=1.0
    )


async def test_an_update_whose_worker_died_is_rescued_and_sent_once_its_lease_expires(
    store: SqlStore,
) -> None:
    await queue(store)
    await die_holding_a_lease(store)
    channel, clock = FakeChannel(), Clock()
    worker, rescuer = updater(store, channel, clock), JobRescuer(store, clock, 1.0)
    woken: list[str] = []
    rescuer.on_rescued(worker.kinds, lambda: woken.append("updates"))
    early = await rescuer.run_once()
    assert (early.retried, early.due_in) == (0, LEASE.total_seconds())  # wakes for the expiry
    idle = await worker.run_once()
    assert (idle.done, idle.due_in) == (0, None)  # still leased: its worker waits for nothing
    clock.now = NOW + LEASE
    assert (await rescuer.run_once()).retried == 1
    assert woken == ["updates"]  # due again now, so its worker is told
    assert (await worker.run_once()).done == 1
    assert channel.updates == [{"ts": "1.2"}]
    assert await states(store) == [(JobState.COMPLETED.value, 2)]  # the lost attempt counts


async def test_a_dead_workers_last_attempt_is_given_up_not_sent(store: SqlStore) -> None:
    await queue(store, max_attempts=1)
    await die_holding_a_lease(store)
    channel, clock = FakeChannel(), Clock()
    clock.now = NOW + LEASE
    assert (await JobRescuer(store, clock, 1.0).run_once()).discarded == 1
    assert (await updater(store, channel, clock).run_once()).done == 0
    assert channel.updates == []
    assert await states(store) == [(JobState.DISCARDED.value, 1)]


async def test_transient_failures_are_retried_with_backoff_then_given_up(
    store: SqlStore,
) -> None:
    await queue(store, max_attempts=2)
    channel, clock = FakeChannel(), Clock()
    channel.answer = ChannelResult.transient("rate limited")
    worker = updater(store, channel, clock)
    first = await worker.run_once()
    assert (first.retried, first.failed) == (1, 0)
    assert first.due_in is not None and first.due_in > 0  # backoff, not at once
    assert (await worker.run_once()).retried == 0  # not before it is due
    clock.now = NOW + timedelta(hours=1)
    second = await worker.run_once()
    assert (second.retried, second.failed) == (0, 1)
    assert len(channel.updates) == 2
    assert await states(store) == [(JobState.DISCARDED.value, 2)]

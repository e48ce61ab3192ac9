"""The work table's one rescuer (``workers.rescuer``) over a store, both dialects: one
round makes every kind's expired leases due again (or gives up a last attempt), tells
each kind's worker once, and sleeps until the next lease expires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from uns_server.domain.jobs import JobKind, JobState, NewJob
from uns_server.store.sql_store import SqlStore
from uns_server.workers.rescuer import JobRescuer

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)
KINDS = (JobKind.MESSAGE_UPDATE, JobKind.FOLLOW_UP, JobKind.PERSON_RULE)


async def test_one_round_rescues_every_kind_and_wakes_each_worker_once(store: SqlStore) -> None:
    new = [NewJob(kind, {}, 3, notification_id=f"n-{kind}") for kind in KINDS for _ in (1, 2)]
    new.append(NewJob(JobKind.MESSAGE_UPDATE, {}, 1, notification_id="last"))
    async with store.write() as tx:
        await tx.jobs.insert_many(new, NOW)
        claimed = await tx.jobs.claim(KINDS, now=NOW, limit=10, lease=LEASE)
        later = await tx.jobs.claim(KINDS, now=NOW + LEASE, limit=10, lease=LEASE)
    assert (len(claimed), later) == (7, [])
    clock = [NOW]
    rescuer = JobRescuer(store, lambda: clock[0], 1.0)
    woken: list[JobKind] = []
    for kind in KINDS:
        rescuer.on_rescued({kind}, lambda k=kind: woken.append(k))  # type: ignore[misc]

    early = await rescuer.run_once()
    assert (early.retried, early.discarded, early.due_in, woken) == (0, 0, 30.0, [])
    clock[0] = NOW + LEASE
    done = await rescuer.run_once()
    assert (done.retried, done.discarded, done.due_in) == (6, 1, None)
    assert sorted(woken) == sorted(KINDS)  # each kind's worker told once
    async with store.write() as tx:
        again = await tx.jobs.claim(KINDS, now=NOW + LEASE, limit=10, lease=LEASE)
    assert {j.kind for j in again} == set(KINDS) and len(again) == 6
    assert all(j.attempt == 2 and j.state is JobState.RUNNING for j in again)

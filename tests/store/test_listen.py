"""Cross-process wake-ups (PostgreSQL LISTEN/NOTIFY): every other process wakes once
per commit, and the committing process is not woken a second time by its own echo."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

from sqlalchemy import text

from tests.conftest import PostgresDatabases
from uns_server.store.db import TOPIC_EVENTS, TOPIC_WORK, Database
from uns_server.store.listen import listen_forever

WITHIN = 10.0


async def test_each_commit_wakes_every_process_exactly_once(postgres: PostgresDatabases) -> None:
    url = await postgres.new()
    processes = {"a": Database(url), "b": Database(url)}
    woken: Counter[str] = Counter()  # TOPIC_WORK wake-ups, by process
    fence = {name: asyncio.Event() for name in processes}  # TOPIC_EVENTS wake-ups
    for name, db in processes.items():
        db.on_commit(TOPIC_WORK, lambda name=name: woken.update([name]))  # type: ignore[misc]
        db.on_commit(TOPIC_EVENTS, fence[name].set)
    topics = (TOPIC_WORK, TOPIC_EVENTS)
    listeners = [asyncio.create_task(listen_forever(db, topics)) for db in processes.values()]

    async def commit(db: Database, topic: str) -> None:
        async with db.write() as tx:
            await tx.conn.execute(text("SELECT 1"))
            tx.signal(topic)

    async def heard_from(sender: str, receiver: str) -> None:
        """Wait until ``receiver`` has heard a commit of ``sender``: one LISTEN connection
        delivers in commit order, so everything committed earlier has reached it too."""
        fence[receiver].clear()
        await commit(processes[sender], TOPIC_EVENTS)
        await asyncio.wait_for(fence[receiver].wait(), WITHIN)

    try:
        # Listening has begun when each listener has fired its start-up wake-ups.
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in fence.values())), WITHIN)
        assert woken == Counter(a=1, b=1)
        await commit(processes["a"], TOPIC_WORK)
        await commit(processes["b"], TOPIC_WORK)
        await heard_from("b", "a")
        await heard_from("a", "b")
        # Once in-process and once by LISTEN: an echo of its own commit would make 4.
        assert woken == Counter(a=3, b=3)
    finally:
        for task in listeners:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for db in processes.values():
            await db.dispose()

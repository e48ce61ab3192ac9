"""WatchEvents replaces terminal callbacks: a producer follows ACKED / DISMISSED /
TIMED_OUT for its notifications, is restarted mid-way, resumes from the cursor it
stored, and misses none (and sees none twice)."""

from __future__ import annotations

from pathlib import Path

from tests.support.server import KEYS, ShiftableClock, start_server
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient

TERMINAL = ["ACKED", "DISMISSED", "TIMED_OUT"]


class CursorFile:
    """What a real producer keeps on disk between restarts."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> int:
        return int(self.path.read_text()) if self.path.exists() else 0

    def save(self, cursor: int) -> None:
        self.path.write_text(str(cursor))


async def follow(target: str, cursor: CursorFile, count: int) -> list[t.Event]:
    """One run of the producer's watcher: take ``count`` terminal events, then stop."""
    seen: list[t.Event] = []
    async with AsyncClient(target, api_key=KEYS["alice"]) as uns:
        start = cursor.load()
        stream = uns.watch(kinds=TERMINAL, after_sequence=start, replay_history=start == 0)
        async for event in stream:
            seen.append(event)
            cursor.save(stream.cursor)
            if len(seen) == count:
                break
    return seen


async def test_restarted_producer_resumes_terminal_events(db_url: str, tmp_path: Path) -> None:
    clock = ShiftableClock()
    server = await start_server(db_url, tmp_path, clock=clock)
    cursor = CursorFile(tmp_path / "cursor")
    try:
        async with (
            AsyncClient(server.target, api_key=KEYS["alice"]) as alice,
            AsyncClient(server.target, api_key=KEYS["rita"]) as rita,
        ):
            ids = [
                (
                    await alice.send(
                        notification_type="ops.page",
                        intent="ACTION_REQUIRED",
                        title=f"page {i}",
                        message="db-1 down",
                        source="pager",
                        idempotency_key=f"page-{i}",
                        require_ack=True,
                        wait_for_first_attempt=True,
                    )
                ).notification_id
                for i in range(6)
            ]
            await rita.acknowledge(ids[0])
            await rita.acknowledge(ids[1], dismiss=True)
            first_run = await follow(server.target, cursor, count=2)

            # While the producer is down: one more ack, and two deadlines pass.
            await rita.acknowledge(ids[2])
            await rita.acknowledge(ids[3], dismiss=True)
            clock.advance(minutes=61)
            await server.app.timers.run_once()  # (or the background sweep, whichever first)
            second_run = await follow(server.target, cursor, count=4)
    finally:
        await server.stop()

    received = first_run + second_run
    assert [e.notification_id for e in received] == ids
    assert [t.EventKind.Name(e.kind) for e in received] == [
        "EVENT_KIND_ACKED",
        "EVENT_KIND_DISMISSED",
        "EVENT_KIND_ACKED",
        "EVENT_KIND_DISMISSED",
        "EVENT_KIND_TIMED_OUT",
        "EVENT_KIND_TIMED_OUT",
    ]
    assert len({e.sequence for e in received}) == len(received)
    assert received[-1].payload["actor"] == "uns-timeout-worker"

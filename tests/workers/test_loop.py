"""The shared worker loop (``workers.loop.run_loop``): what every worker gets from it.
Driven by scripted workers; the poll is far beyond the test, so only wake-ups, full
batches and due times can make a round run (no wall-clock thresholds)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from uns_server.workers.loop import LoopWorker, Round
from uns_server.workers.supervision import FAULTS_BEFORE_UNHEALTHY, Supervision

FAR = 600.0  # the poll: never reached by a test


class Scripted(LoopWorker):
    """Plays ``script`` one round at a time (an exception is raised), then idles."""

    name = "scripted"

    def __init__(self, script: list[Round | Exception], supervision: Supervision | None) -> None:
        super().__init__(FAR, supervision)
        self._script: Iterator[Round | Exception] = iter(script)
        self.rounds = 0
        self.ran = asyncio.Event()
        self.progress = asyncio.Condition()

    async def run_once(self) -> Round:
        self.rounds += 1
        self.ran.set()
        async with self.progress:
            self.progress.notify_all()
        step = next(self._script, Round())
        if isinstance(step, Exception):
            raise step
        return step


class Optional(Scripted):
    name = "optional"
    required = False


async def rounds_until_idle(worker: Scripted, wakes: int = 0) -> None:
    """Run ``worker`` and wake it ``wakes`` times, each after its previous round."""
    task = asyncio.create_task(worker.run())
    for woken in range(wakes + 1):
        await worker.ran.wait()
        worker.ran.clear()
        await asyncio.sleep(0)  # let the round's result reach the loop
        if woken < wakes:
            worker.wake()
    worker.stop()
    await asyncio.wait_for(task, 5)


async def test_a_full_batch_or_a_due_time_runs_the_next_round_without_a_wake_up() -> None:
    worker = Scripted([Round(more=True), Round(more=True), Round(due_in=0.0)], None)
    task = asyncio.create_task(worker.run())
    async with worker.progress:  # three scripted rounds, then an idle one that sleeps
        await worker.progress.wait_for(lambda: worker.rounds == 4)
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert worker.rounds == 4


async def test_a_required_workers_failing_rounds_make_it_unhealthy_until_one_succeeds() -> None:
    supervision = Supervision()
    failing: list[Round | Exception] = [RuntimeError("storage")] * FAULTS_BEFORE_UNHEALTHY
    worker = Scripted(failing, supervision)
    task = asyncio.create_task(worker.run())
    for _ in range(FAULTS_BEFORE_UNHEALTHY):  # a failed round waits for the poll or a wake
        await worker.ran.wait()
        worker.ran.clear()
        await asyncio.sleep(0)
        worker.wake()
    await worker.ran.wait()  # the round after the faults: it succeeds
    assert worker.rounds == FAULTS_BEFORE_UNHEALTHY + 1
    worker.stop()
    await asyncio.wait_for(task, 5)
    assert supervision.changed.is_set()  # went unhealthy (and back)
    assert supervision.unhealthy == ()


async def test_failing_rounds_never_end_the_loop_and_stay_unhealthy_while_they_last() -> None:
    supervision = Supervision()
    worker = Scripted([RuntimeError("storage")] * 10, supervision)
    task = asyncio.create_task(worker.run())
    for _ in range(FAULTS_BEFORE_UNHEALTHY):
        await worker.ran.wait()
        worker.ran.clear()
        await asyncio.sleep(0)
        worker.wake()
    await worker.ran.wait()
    assert supervision.unhealthy == ("scripted",)
    worker.stop()
    await asyncio.wait_for(task, 5)


async def test_a_worker_that_is_not_required_never_reports() -> None:
    supervision = Supervision()
    worker = Optional([RuntimeError("metrics query")] * 5, supervision)
    await rounds_until_idle(worker, wakes=5)
    assert supervision.unhealthy == () and not supervision.changed.is_set()


async def test_stop_ends_the_loop_after_the_current_round() -> None:
    worker = Scripted([], None)
    await rounds_until_idle(worker)
    assert worker.rounds == 1

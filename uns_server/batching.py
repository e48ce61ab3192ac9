"""Group commit: concurrent submissions share one transaction.

A submission that finds the committer idle runs at once, alone: no added latency
for a lone caller. Submissions that arrive while a batch is in flight wait and go
together in the next batch. Under load one transaction (one round trip per
statement, one event-order lock, one NOTIFY, one COMMIT) then serves many callers,
which is where the per-request cost went (docs/PERFORMANCE.md). Intake groups
SendNotification calls with it; the dispatcher groups settlements.

The batch function answers every item: a value, or the exception to raise to that
item's caller. If the batch function itself raises, every caller of the batch gets
that exception.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

BatchFn = Callable[[Sequence[T]], Awaitable[Sequence[R | Exception]]]


class GroupCommit(Generic[T, R]):
    def __init__(self, run: BatchFn[T, R], *, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._run = run
        self._max_batch = max_batch
        self._waiting: list[tuple[T, asyncio.Future[tuple[R, int]]]] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        """Items waiting for the next batch (not those of the batch in flight)."""
        return len(self._waiting)

    async def submit(self, item: T) -> tuple[R, int]:
        """The item's result and the size of the batch that committed it.

        A caller cancelled while waiting does not withdraw its item from a batch
        already running: like any RPC past its deadline, the write may still land
        (an idempotent retry then sees it).
        """
        future: asyncio.Future[tuple[R, int]] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._task is None:
            # A fresh context: the batch must not run inside the first caller's
            # trace span (or any other request-scoped context variable).
            self._task = asyncio.create_task(self._drain(), context=contextvars.Context())
        return await future

    async def submit_many(self, items: Sequence[T]) -> list[R | Exception]:
        """Every item's result (or the exception its caller would have seen), in order.

        The items queue together, so they go in as few batches as ``max_batch``
        allows (with whatever else is waiting); one item's exception does not
        affect the others.
        """
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[tuple[R, int]]] = []
        for item in items:
            future: asyncio.Future[tuple[R, int]] = loop.create_future()
            self._waiting.append((item, future))
            futures.append(future)
        if futures and self._task is None:
            self._task = asyncio.create_task(self._drain(), context=contextvars.Context())
        answers = await asyncio.gather(*futures, return_exceptions=True)
        results: list[R | Exception] = []
        for answer in answers:
            if isinstance(answer, BaseException):
                if not isinstance(answer, Exception):  # cancelled: the outcome is unknown
                    raise answer
                results.append(answer)
            else:
                results.append(answer[0])
        return results

    async def close(self) -> None:
        """Cancel the batch in flight and every waiting one: their callers see
        CancelledError (a shutdown past its grace)."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for _, future in self._waiting:  # a task cancelled before it ever ran
            future.cancel()
        self._waiting.clear()

    async def _drain(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[: self._max_batch]
                del self._waiting[: self._max_batch]
                await self._commit(batch)
        finally:
            self._task = None

    async def _commit(self, batch: list[tuple[T, asyncio.Future[tuple[R, int]]]]) -> None:
        size = len(batch)
        try:
            results = await self._run([item for item, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:
            # Cancelled (loop shutting down): the callers cannot learn the outcome.
            for _, future in batch:
                future.cancel()
            for _, future in self._waiting:
                future.cancel()
            self._waiting.clear()
            raise
        for (_, future), result in zip(batch, results, strict=True):
            if future.done():  # its caller was cancelled
                continue
            if isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result((result, size))

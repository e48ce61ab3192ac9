"""CPU per phase of the pipeline (accept, claim, provider call, settle, fan-out, ...).

Off unless ``UNS_PHASE_CPU=1`` is in the server's environment when it starts (the
benchmark sets it; production has no use for it). The variable is read once, at
import: off, the ``@phased`` marks are the undecorated functions and cost nothing.
On, every asyncio task's coroutine is wrapped, and each *step*
of a task (one ``send`` into its coroutine, from one await to the next) is timed with
the event-loop thread's CPU clock and charged to the phase the task is in at that
moment. Code marks its phase with ``@phased(SETTLE)`` on an async function (or
``with phase(SETTLE): ...``); the mark is a
context variable, so it follows the task across awaits and is inherited by tasks it
creates. A phase switch inside a step charges the part before the switch to the old
phase. CPU is charged where it is spent, not where a caller waits: a group commit's
batch runs in its own task, so it is labelled inside the batch function.

What no task step covers lands in two more buckets: ``loop and I/O callbacks``
(the selector, grpc's completion callbacks, asyncpg's protocol, timers) and
``other threads`` (grpc's C-core threads, the metrics exporter). With them the
phases add up to the process's CPU since ``enable``.

The totals are exported as ``uns_phase_cpu_seconds_total{phase}`` on the metrics
endpoint (``metrics_listen``), which the benchmark reads around each window.

Cost when on: a Python-level wrapper call and two clock reads per task step, plus
two per phase switch: about 1 µs per step (a step alone costs about as much), a few
per cent of a request's CPU, which is why it is off by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

ENV = "UNS_PHASE_CPU"
REQUESTED = os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")

ACCEPT = "accept (RPC handler)"
ACCEPT_COMMIT = "accept (transaction)"
CLAIM = "claim + attempt start"
ATTEMPT = "attempt bookkeeping"
PROVIDER = "provider call"
SETTLE = "settle"
FAN_OUT = "event fan-out"
DISPATCH_LOOP = "dispatch loop"
OTHER_TASKS = "other task code"  # tasks with no phase: grpc's RPC plumbing, other RPCs
OUTSIDE = "loop and I/O callbacks"
OTHER_THREADS = "other threads"
# The order tables print them in.
PHASES = (
    ACCEPT, ACCEPT_COMMIT, CLAIM, ATTEMPT, PROVIDER, SETTLE, FAN_OUT, DISPATCH_LOOP,
    OTHER_TASKS, OUTSIDE, OTHER_THREADS,
)  # fmt: skip

_phase: ContextVar[str] = ContextVar("uns_phase", default=OTHER_TASKS)
_NOOP: AbstractContextManager[None] = contextlib.nullcontext()


class _Meter:
    """The running totals; used only from the event-loop thread, except ``snapshot``."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.in_step = False
        self.thread_clock = time.pthread_getcpuclockid(threading.get_ident())
        self.mark = time.thread_time()
        self.loop_base = self.mark
        self.process_base = time.process_time()

    def charge(self, phase: str) -> None:
        now = time.thread_time()
        self.totals[phase] += now - self.mark
        self.mark = now

    def snapshot(self) -> dict[str, float]:
        """CPU seconds per phase since ``enable``; callable from any thread."""
        loop_cpu = time.clock_gettime(self.thread_clock) - self.loop_base
        process_cpu = time.process_time() - self.process_base
        totals = dict.fromkeys(PHASES, 0.0) | dict(self.totals)
        # Whatever the loop thread spent that no step was charged with yet.
        totals[OUTSIDE] += max(0.0, loop_cpu - sum(totals.values()))
        totals[OTHER_THREADS] = max(0.0, process_cpu - loop_cpu)
        return totals


_meter: _Meter | None = None


class _Phase:
    __slots__ = ("_name", "_token")

    def __init__(self, name: str) -> None:
        self._name = name
        self._token: Token[str] | None = None

    def __enter__(self) -> None:
        meter = _meter
        if meter is not None and meter.in_step:
            meter.charge(_phase.get())
        self._token = _phase.set(self._name)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        meter = _meter
        if meter is not None and meter.in_step:
            meter.charge(self._name)
        if self._token is not None:
            _phase.reset(self._token)


def phase(name: str) -> AbstractContextManager[None]:
    """Charge the CPU of the enclosed code (across its awaits) to ``name``."""
    return _Phase(name) if _meter is not None else _NOOP


P = ParamSpec("P")
R = TypeVar("R")


class phased:  # a decorator, named like one
    """``@phased(name)``: ``phase(name)`` around every call of an async function; the
    function itself, unchanged, unless UNS_PHASE_CPU was set at import."""

    def __init__(self, name: str) -> None:
        self._name = name

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]: ...
    def __call__(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
        if not REQUESTED:
            return fn
        name = self._name

        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with phase(name):
                return await fn(*args, **kwargs)

        return wrapper


class _Metered(Coroutine[Any, Any, Any]):
    """A task's coroutine, timed step by step."""

    __slots__ = ("_coro",)

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro

    def send(self, value: Any) -> Any:
        meter = _meter
        if meter is None:
            return self._coro.send(value)
        meter.charge(OUTSIDE)  # from the last step's end to here: not in any task
        meter.in_step = True
        try:
            return self._coro.send(value)
        finally:
            meter.in_step = False
            meter.charge(_phase.get())

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        meter = _meter
        if meter is None:
            return self._coro.throw(typ, val, tb)
        meter.charge(OUTSIDE)
        meter.in_step = True
        try:
            return self._coro.throw(typ, val, tb)
        finally:
            meter.in_step = False
            meter.charge(_phase.get())

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._coro.__await__()

    def __getattr__(self, name: str) -> Any:  # cr_frame, __qualname__, ... for task reprs
        return getattr(self._coro, name)


def _task_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
    return asyncio.Task(_Metered(coro), loop=loop, **kwargs)


def enable() -> None:
    """Start accounting on the running loop (call from its thread, before the tasks
    to be measured are created)."""
    global _meter
    loop = asyncio.get_running_loop()
    if _meter is None:
        _meter = _Meter()
    loop.set_task_factory(_task_factory)


def disable() -> None:
    global _meter
    with contextlib.suppress(RuntimeError):
        asyncio.get_running_loop().set_task_factory(None)
    _meter = None


def enabled() -> bool:
    return _meter is not None


def snapshot() -> dict[str, float]:
    """CPU seconds per phase since ``enable`` (empty when off)."""
    meter = _meter
    return meter.snapshot() if meter is not None else {}

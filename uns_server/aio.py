"""Small asyncio helpers.

Why not ``asyncio.wait_for``: on Python 3.11 it can swallow a cancellation that
races with the awaited future completing (CPython gh-86296), leaving a worker loop
that was told to stop running forever. ``asyncio.timeout`` does not have that flaw.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``event``; True if it was set."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True

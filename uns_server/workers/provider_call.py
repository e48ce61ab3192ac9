"""The one guarded provider call every worker makes (deliveries, follow-ups, message
updates): bounded by a share of the lease, and never raising.

A call that outlives ``SEND_TIMEOUT_SHARE_OF_LEASE`` of the lease would settle after
the lease expired (and another worker may have claimed the row meanwhile), so it is
cut off and answered transient. An adapter that raises is a bug, but the obligation or
update it was carrying must not be lost to it: that is a transient answer too (retried
with backoff), logged with its traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from uns_server.channels.base import ChannelResult

log = logging.getLogger("uns.channels")

SEND_TIMEOUT_SHARE_OF_LEASE = 0.8


async def guarded_call(
    call: Callable[[], Awaitable[ChannelResult]],
    *,
    lease: timedelta,
    log_extra: dict[str, Any],
) -> ChannelResult:
    """``call()`` (building its message included) under a lease this long, cut off
    after its share of it; a timeout or any exception is ``ChannelResult.transient``."""
    try:
        async with asyncio.timeout(lease.total_seconds() * SEND_TIMEOUT_SHARE_OF_LEASE):
            return await call()
    except TimeoutError:
        return ChannelResult.transient("provider call timed out")
    except Exception as exc:  # an adapter bug must not lose the work it carries
        log.exception("channel adapter raised", extra=log_extra)
        return ChannelResult.transient(f"adapter error: {type(exc).__name__}")

"""A claimed leader that a maintenance window holds (``domain.maintenance``): not
attempted, but given back (lease released, the claim's attempt not counted) and due
again at the window's end, with an EVENT_KIND_HELD event. Asked of the windows in
memory; only a hit reads the stored window."""

from __future__ import annotations

from datetime import datetime

from uns_server.domain.enums import EventKind
from uns_server.domain.maintenance import ClaimHold, held_payload
from uns_server.domain.records import Notification
from uns_server.services.maintenance import OpenWindows
from uns_server.store.port import NewEvent, WriteTransaction
from uns_server.workers.dispatch.claims import event


async def claim_hold(
    windows: OpenWindows, tx: WriteTransaction, n: Notification, token: str, now: datetime
) -> tuple[ClaimHold, NewEvent] | None:
    """The hold of ``n`` (as before its claim, leased under ``token``), or None."""
    intent = n.notification.intent.value if n.notification.intent else None
    window = windows.holding(n.notification_type, intent, now)
    if window is not None:
        window = await windows.verified(tx, window, n.notification_type, intent, now)
    if window is None:
        return None
    hold = ClaimHold(n.id, token, window.window_id, window.end_time, n.attempts, n.cycle_attempts)
    return hold, event(n, EventKind.HELD, held_payload(window))

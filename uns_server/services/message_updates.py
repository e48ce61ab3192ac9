"""Queue updates of sent messages when an obligation ends, in the settling transaction.

Registered as an ``Acks`` settle hook, so every path that ends an ack queues them: an
answer over gRPC, a link, Slack, PagerDuty, and the timeout; a withdrawal queues them
through ``SentMessageUpdates``. The rows are an outbox
(``store.message_updates``); the ``MessageUpdater`` worker sends them later, so a slow
or failing provider never holds up the answer itself.

What is updated: Slack messages sent through the Web API (``chat.update`` with the
stored channel + ts) and PagerDuty alerts (``acknowledge``/``resolve`` with the stored
dedup_key). A PagerDuty answer is not echoed back to PagerDuty.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from uns_server.domain import withdrawal
from uns_server.domain.enums import AckStatus
from uns_server.domain.records import Notification
from uns_server.store import message_updates
from uns_server.store.db import WriteTx

VIA_PAGERDUTY = "pagerduty"
VIA_WITHDRAWAL = "withdrawal"
TOPIC_MESSAGE_UPDATES = "uns_message_updates"


def updatable(reference: Mapping[str, Any], via: str) -> bool:
    kind = reference.get("type")
    if kind == "slack":
        return bool(reference.get("slack_ts") and reference.get("slack_channel"))
    if kind == "pagerduty":
        return bool(reference.get("pagerduty_dedup_key")) and via != VIA_PAGERDUTY
    return False


async def queue_on_settle(
    tx: WriteTx, row: Notification, outcome: AckStatus, actor: str, via: str, now: datetime
) -> None:
    refs: Mapping[str, Any] = row.provider_refs or {}
    doc = row.notification
    settlement = {
        "state": outcome.value,
        "actor": actor,
        "via": via,
        "at": now.isoformat(),
        "title": doc["title"],
        "message": doc["message"],
        "priority": doc["effective"]["priority"],
        "intent": doc.get("intent") or "",
        "source": row.source,
    }
    rows = [
        {"notification_id": row.id, "channel": name, "reference": ref, "outcome": settlement}
        for name, ref in sorted(refs.items())
        if updatable(ref, via)
    ]
    if rows:
        await message_updates.enqueue(tx.conn, rows, now)
        tx.signal(TOPIC_MESSAGE_UPDATES)


class SentMessageUpdates:
    """``services.withdrawal.SentMessages``: a withdrawal updates the messages already
    sent (Slack ``chat.update``, PagerDuty ``resolve``) like any other end of the
    obligation, through the same outbox."""

    async def withdrawn(
        self,
        tx: WriteTx,
        row: Notification,
        scope: withdrawal.Scope,
        actor: str,
        reason: str,
        now: datetime,
    ) -> None:
        await queue_on_settle(tx, row, AckStatus.WITHDRAWN, actor, VIA_WITHDRAWAL, now)

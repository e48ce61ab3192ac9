"""Queue updates of sent messages when an obligation ends, in the settling transaction.

Registered as an ``AckService`` settle hook, so every path that ends an ack queues them: an
answer over gRPC, a link, Slack, PagerDuty, and the timeout; a withdrawal queues them
through ``SentMessageUpdates``. Each update is a ``message_update`` job of the work
table (``domain.message_updates.MessageUpdate.job``, the store port's ``Jobs``); the
``MessageUpdater`` worker sends them later, so a slow or failing provider never holds
up the answer itself.

What is updated: every message the obligation sent, the delivery and each reminder and
escalation step (``services.message_updates.updatable``): Slack messages sent through the
Web API (``chat.update`` with the stored channel + ts), PagerDuty incidents (``resolve``
with the stored dedup_key; on TIMED_OUT only where the channel says
``resolve_on_timeout``), webhook receivers (one ``uns.notification.settled`` request),
ntfy topics and Teams channels (one follow-up message with the outcome), Telegram
messages (``editMessageText`` with the stored chat + message id), and a person's
number on a ``twilio_sms`` channel that sets ``notify_outcome`` (an outcome SMS).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from uns_server.domain import withdrawal
from uns_server.domain.enums import AckStatus
from uns_server.domain.message_updates import MessageUpdate
from uns_server.domain.outcomes import ProviderRef, ProviderRefs
from uns_server.domain.records import Notification
from uns_server.store.port import WriteTransaction

# A queued update whose message was still being delivered when the obligation ended:
# its reference is the delivery's, read once that attempt has settled.
IN_FLIGHT = "in_flight_channel"
# A stand-in queued while messages whose keys nobody knows yet were being sent (a
# person's routes are resolved at send time; a follow-up step's references are written
# when it settles): once nothing is being sent, it queues an update of every message
# sent since (``sent_since``), the keys it lists being those known when it was queued.
IN_FLIGHT_SENT = "in_flight_sent"
VIA_WITHDRAWAL = "withdrawal"
TOPIC_MESSAGE_UPDATES = "uns_message_updates"


def updatable(reference: ProviderRef) -> bool:
    """Whether the message ``reference`` names is told how the obligation ended: every
    Slack message posted through the Web API and every PagerDuty incident (the delivery,
    each reminder, each escalation step); a webhook receiver once per channel (for the
    delivery's reference), as one ``uns.notification.settled`` request; an ntfy topic and a
    Teams channel once each (for the delivery's message), as a follow-up message; every
    Telegram message, edited; a person's number once with an outcome SMS where the
    channel sets ``notify_outcome``."""
    kind = reference.channel_type
    if kind == "slack":
        return bool(reference.slack_ts and reference.slack_channel)
    if kind == "pagerduty":
        return bool(reference.pagerduty_dedup_key)
    if kind in ("webhook", "teams"):
        return not reference.follow_up
    if kind == "ntfy":
        return bool(reference.provider_field("ntfy_topic")) and not reference.follow_up
    if kind == "telegram":
        return bool(reference.provider_field("telegram_message_id"))
    if kind == "twilio_sms":  # only where the channel asked for it (``notify_outcome``)
        wanted = reference.provider_field("twilio_notify_outcome") == "true"
        return wanted and not reference.follow_up
    return False


def in_flight_channels(row: Notification) -> list[str]:
    """The channels of a delivery attempt still in flight (leased, not yet settled):
    an answer can arrive before its result is committed, so their references are
    looked up when the update is sent (``IN_FLIGHT``)."""
    if row.ack_status is not None or row.lease_token is None:
        return []
    succeeded = set(row.outcome.channels_succeeded)
    return [c for c in row.notification.effective.channels if c not in succeeded]


def sending_unknown(row: Notification, *, follow_up_sending: bool) -> bool:
    """Are messages being sent whose references no key names yet: a delivery attempt
    asking people (their routes are resolved when it sends), or a follow-up step
    (``follow_up_sending``: its job is running, ``FollowUpReads.sending``; or a lease of
    the previous release's on the row)?"""
    people = bool(row.notification.effective.targets)
    return (
        (row.lease_token is not None and people)
        or follow_up_sending
        or row.followup_lease_token is not None
    )


def still_sending(row: Notification, now: datetime, *, follow_up_sending: bool) -> bool:
    """Does a live lease still send messages of ``row`` (delivery or follow-up)?"""
    delivery = row.lease_until is not None and row.lease_until > now
    follow_up = row.followup_lease_until is not None and row.followup_lease_until > now
    return (
        (row.lease_token is not None and delivery)
        or follow_up_sending
        or (row.followup_lease_token is not None and follow_up)
    )


def sent_since(
    row: Notification, known: Sequence[str], outcome: Mapping[str, Any]
) -> list[MessageUpdate]:
    """The updates of the messages ``row`` sent since an ``IN_FLIGHT_SENT`` stand-in
    was queued (their keys not in ``known``), showing ``outcome``."""
    refs = row.provider_refs or {}
    return _updates(row, {k: v for k, v in refs.items() if k not in set(known)}, outcome)


def _updates(
    row: Notification, refs: ProviderRefs, outcome: Mapping[str, Any]
) -> list[MessageUpdate]:
    return [
        MessageUpdate(row.id, ref.channel or key, ref.json, outcome)
        for key, ref in sorted(refs.items())
        if updatable(ref)
    ]


def outcome_of(
    row: Notification, state: AckStatus, actor: str, via: str, at: datetime
) -> dict[str, Any]:
    """What a message is updated to show (``channels.base.ObligationOutcome``'s fields):
    ``state`` by ``actor`` ``via`` a channel ``at`` (a snooze's: its end)."""
    doc = row.notification
    return {
        "state": state.value,
        "actor": actor,
        "via": via,
        "at": at.isoformat(),
        "title": doc.title,
        "message": doc.message,
        "priority": doc.effective.priority.value,
        "intent": doc.intent.value if doc.intent else "",
        "source": row.source,
        "notification_id": row.id,
    }


async def queue_on_settle(
    tx: WriteTransaction, row: Notification, outcome: AckStatus, actor: str, via: str, now: datetime
) -> None:
    refs = row.provider_refs or {}
    settlement = outcome_of(row, outcome, actor, via, now)
    queued = _updates(row, refs, settlement)
    in_flight = in_flight_channels(row)
    queued += [
        MessageUpdate(row.id, channel, {IN_FLIGHT: channel}, settlement) for channel in in_flight
    ]
    if sending_unknown(row, follow_up_sending=await tx.follow_ups.sending(row.id, now)):
        known = sorted({*refs, *in_flight})
        queued.append(MessageUpdate(row.id, IN_FLIGHT_SENT, {IN_FLIGHT_SENT: known}, settlement))
    if queued:
        await queue(tx, queued, now)


async def queue(tx: WriteTransaction, updates: Sequence[MessageUpdate], now: datetime) -> None:
    """Insert the jobs that send ``updates``, due now, and wake their worker after
    the commit."""
    await tx.jobs.insert_many([u.job() for u in updates], now)
    tx.signal(TOPIC_MESSAGE_UPDATES)


class SentMessageUpdates:
    """``services.withdrawal.SentMessages``: a withdrawal updates the messages already
    sent (Slack ``chat.update``, PagerDuty ``resolve``) like any other end of the
    obligation, through the same outbox."""

    async def withdrawn(
        self,
        tx: WriteTransaction,
        row: Notification,
        scope: withdrawal.Scope,
        actor: str,
        reason: str,
        now: datetime,
    ) -> None:
        await queue_on_settle(tx, row, AckStatus.WITHDRAWN, actor, VIA_WITHDRAWAL, now)

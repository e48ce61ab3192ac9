"""Answers that arrive as provider callbacks: a Slack button, a PagerDuty incident change.

The transport (``http.integrations``) has verified the provider's signature; this
service finds the notification, then settles it through ``Acks.try_answer`` (the same
decision as Acknowledge) as the person the provider names: ``slack:<user id>``,
``pagerduty:<user id>``, or ``recipient:<id>`` when that provider user is a contact of
the person whose own message was answered. Slack buttons carry an action-link token (it binds the
notification and the action); PagerDuty incidents are found by their ``incident_key``,
which is the dedup_key UNS triggered them with.

A callback's receipt (replay protection) is written in the transaction that settles
it (``Acks.try_answer``): a settle that fails leaves no receipt, so the provider's
retry of the same callback is served, not refused as already seen.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from uns_server.domain.callback_payloads import PagerDutyEvent, SlackUser
from uns_server.domain.enums import ACK_OWED, AckStatus
from uns_server.domain.errors import AckConflict, AckDeadlinePassed
from uns_server.domain.links import ACK, DISMISS
from uns_server.domain.outcomes import ProviderRefs
from uns_server.domain.records import Notification
from uns_server.domain.validation import validate_notification_id
from uns_server.services.acks import RECIPIENT_ACTOR, Acks, Receipt
from uns_server.services.action_links import ActionLinkService
from uns_server.store.port import Store

log = logging.getLogger("uns.callbacks")
VIA_SLACK = "slack"
VIA_PAGERDUTY = "pagerduty"
SLACK_ACTIONS = {"uns_ack": ACK, "uns_dismiss": DISMISS}
# The outcome of a callback whose receipt was already there: refused, changes nothing.
REPLAYED = "replayed"
# A press on a button of an obligation that has ended is told so (only the presser sees it).
STALE_OUTCOMES = frozenset({"conflict", "not_pending", "deadline_passed", "repeat"})


@dataclass(frozen=True)
class Slack:
    """What a verified button token names."""

    notification_id: str
    dismiss: bool
    recipient: str


@dataclass(frozen=True)
class Pressed:
    """What a button press came to (for the log and tests), and for a press on an
    obligation that has ended, the note telling the presser (``settled_note``) of the
    row the answer was decided on."""

    outcome: str
    note: str | None = None


@dataclass(frozen=True)
class Incident:
    """What a PagerDuty incident event answers, from one read of the notification: the
    channels that opened the incident, and ``recipient:<id>`` of the person whose own
    PagerDuty contact it paged (None for a channel's incident)."""

    notification_id: str
    channels: list[str]
    paged: str | None


def _posted(refs: ProviderRefs, provider_key: str, value: str) -> list[str]:
    return [
        r.channel or name for name, r in refs.items() if r.provider_field(provider_key) == value
    ]


def _slack_posters(refs: ProviderRefs) -> list[str]:
    """The UNS channels of type ``slack`` that posted a message for the notification
    (the delivery's, a person's direct message, a follow-up's), from the references
    recorded when Slack accepted each."""
    return sorted({r.channel or name for name, r in refs.items() if r.channel_type == VIA_SLACK})


def _paged_person(refs: ProviderRefs, incident_key: str) -> str | None:
    """``recipient:<id>`` of the person whose own message opened this incident (a
    policy target's PagerDuty contact), or None for a channel's incident."""
    for ref in refs.values():
        if ref.pagerduty_dedup_key == incident_key and ref.recipient_id:
            return RECIPIENT_ACTOR + ref.recipient_id
    return None


def settled_note(row: Notification | None) -> str | None:
    """For a press on a button of an obligation that has ended: who settled it and
    when, in a sentence for the person who pressed (None while it is still open).
    A withdrawal does not name who withdrew (as ``ACK_NOT_PENDING`` does not)."""
    if row is None or row.ack_status is None or row.ack_status in ACK_OWED:
        return None
    at = (row.responded_at or row.updated_at).astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    state = row.ack_status
    if state == AckStatus.WITHDRAWN:
        return f"This notification was withdrawn at {at} UTC; no answer is needed."
    if state == AckStatus.TIMED_OUT:
        return f"This notification was not answered in time ({at} UTC); escalation is required."
    done = "acknowledged" if state == AckStatus.ACKED else "dismissed"
    return f"This notification was already {done} by {row.actor} at {at} UTC."


def receipt_digest(provider: str, proof: bytes) -> str:
    return hashlib.sha256(provider.encode() + b"|" + proof).hexdigest()


class ProviderAnswers:
    def __init__(
        self,
        store: Store,
        acks: Acks,
        links_service: ActionLinkService,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._acks = acks
        self._links = links_service
        self._clock = clock

    async def claim(self, receipt: Receipt) -> bool:
        """Insert the receipt of a callback that settles nothing (no button UNS
        signed, an incident UNS did not open); False if it is there already (a
        replay). A callback that settles writes its receipt in the settling
        transaction instead (``Acks.try_answer``)."""
        async with self._store.write() as tx:
            return await tx.receipts.record(receipt.digest, receipt.provider, self._clock())

    async def slack_target(self, action_id: str, token: str) -> Slack | None:
        """The notification and action a Block Kit button names; None if invalid."""
        action = SLACK_ACTIONS.get(action_id)
        claims = await self._links.verify(token) if action else None
        if action is None or claims is None or action not in claims.actions:
            return None
        return Slack(claims.notification_id, action == DISMISS, claims.recipient)

    async def slack_posters(self, nid: str) -> list[str]:
        """The Slack channels that posted a message of the notification, as UNS recorded
        them (never what a payload claims): a press on one of its buttons must be signed
        with one of their secrets. Empty when none is recorded (no Slack message, or one
        whose attempt has not committed yet): no Slack press is accepted then."""
        return _slack_posters(await self._refs(nid))

    async def _refs(self, nid: str) -> ProviderRefs:
        async with self._store.read() as tx:
            row = await tx.notifications.get(nid)
        return (row.provider_refs or {}) if row is not None else {}

    async def slack_action(
        self, target: Slack, user: SlackUser, receipt: Receipt | None = None
    ) -> Pressed:
        """One Block Kit button press, by the (type-checked) Slack user (``replayed`` if
        ``receipt`` was there already)."""
        metadata = {
            k: v
            for k, v in (
                ("slack_user_name", user.name),
                ("slack_team_id", user.team_id),
                ("recipient", target.recipient),
            )
            if v
        }
        actor = f"slack:{user.id}"
        if await self._is_contact(target.recipient, user.id):
            actor = target.recipient  # the person the direct message was for (SPEC §6)
        outcome, row = await self._settle(
            target.notification_id, actor, VIA_SLACK, target.dismiss, metadata, receipt
        )
        return Pressed(outcome, settled_note(row) if outcome in STALE_OUTCOMES else None)

    async def _is_contact(self, recipient: str, address: str) -> bool:
        """Is ``address`` (a Slack user id, a PagerDuty user id) a contact address of the
        person ``recipient`` names (``recipient:<id>``, the identity a person's own
        message carries)? Anyone else answering a forwarded button or a shared incident
        answers as their provider user."""
        if not recipient.startswith(RECIPIENT_ACTOR):
            return False
        async with self._store.read() as tx:
            person = await tx.people.get_recipient(recipient.removeprefix(RECIPIENT_ACTOR))
        return person is not None and any(c.address == address for c in person.contacts)

    async def pagerduty_incident(self, event: PagerDutyEvent) -> Incident | None:
        """What an ``incident.acknowledged``/``resolved`` event answers; None when it is
        not an incident UNS triggered (or none is recorded yet: an answer racing the
        attempt's commit)."""
        incident_key = event.incident_key
        if not incident_key:
            return None
        try:  # UNS triggers with "<notification id>:<channel>:<cycle>"
            nid = validate_notification_id(incident_key.split(":", 1)[0])
        except Exception:
            return None
        refs = await self._refs(nid)
        channels = _posted(refs, "pagerduty_dedup_key", incident_key)
        return Incident(nid, channels, _paged_person(refs, incident_key)) if channels else None

    async def pagerduty_event(
        self, incident: Incident, event: PagerDutyEvent, receipt: Receipt | None = None
    ) -> str:
        """Settle as ACKED, as the PagerDuty user the event names (``replayed`` if
        ``receipt`` was there already)."""
        agent_id = event.agent_id
        actor = f"pagerduty:{agent_id}" if agent_id else "pagerduty:unknown"
        person = incident.paged
        if agent_id and person and await self._is_contact(person, agent_id):
            actor = person  # the person the incident paged acknowledged it (SPEC §6)
        metadata = {
            k: v
            for k, v in (
                ("pagerduty_event", event.event_type),
                ("pagerduty_incident", event.incident_id),
                ("pagerduty_user_name", event.agent_name),
            )
            if v
        }
        outcome, _row = await self._settle(
            incident.notification_id, actor, VIA_PAGERDUTY, False, metadata, receipt
        )
        return outcome

    async def _settle(
        self,
        nid: str,
        actor: str,
        via: str,
        dismiss: bool,
        metadata: dict[str, str],
        receipt: Receipt | None,
    ) -> tuple[str, Notification | None]:
        """What happened, and the row as the answer was decided on (as settled)."""
        answer = await self._acks.try_answer(
            nid, actor=actor, via=via, dismiss=dismiss, metadata=metadata, receipt=receipt
        )
        if answer.replayed:
            return REPLAYED, None
        if isinstance(answer.refusal, AckConflict):
            return "conflict", answer.row
        if isinstance(answer.refusal, AckDeadlinePassed):
            return "deadline_passed", answer.row
        if answer.refusal is not None:  # AckNotPending, NotFound
            return "not_pending", answer.row
        log.info(
            "answered from a provider",
            extra={"notification_id": nid, "actor": actor, "via": via, "repeat": answer.repeat},
        )
        return ("repeat" if answer.repeat else "settled"), answer.row

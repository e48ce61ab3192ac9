"""Answers that arrive as provider callbacks: a Slack button, a PagerDuty incident change.

The transport (``http.integrations``) has verified the provider's signature; this
service finds the notification, then settles it through ``AckService.try_answer`` (the same
decision as Acknowledge) as the person the provider names: ``slack:<user id>``,
``pagerduty:<user id>``, or ``recipient:<id>`` when that provider user is a contact of
the person whose own message was answered. Slack buttons carry an action-link token (it binds the
notification and the action); PagerDuty incidents are found by their ``incident_key``,
which is the dedup_key UNS triggered them with.

A Snooze button (Slack's, Telegram's) snoozes for ``LINK_SNOOZE`` through
``Snoozes.try_snooze_as`` as the same person an answer would settle as: whoever may
acknowledge may snooze (SPEC §7); on an obligation that has ended it changes nothing
and the presser is told how it ended, as for an answer.

A callback's receipt (replay protection) is written in the transaction that settles
it (``AckService.try_answer``): a settle that fails leaves no receipt, so the provider's
retry of the same callback is served, not refused as already seen.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from uns_server.channels.base import AnswerLinks, ObligationOutcome
from uns_server.domain.callback_payloads import PagerDutyEvent, SlackUser
from uns_server.domain.enums import ACK_OWED, AckStatus
from uns_server.domain.errors import AckConflict, AckDeadlinePassed
from uns_server.domain.links import ACK, DISMISS
from uns_server.domain.outcomes import ProviderRefs
from uns_server.domain.records import Notification
from uns_server.domain.validation import validate_notification_id
from uns_server.services.acks import RECIPIENT_ACTOR, AckService, Answer, Receipt
from uns_server.services.action_links import LINK_SNOOZE, ActionLinkService
from uns_server.services.message_updates import outcome_of
from uns_server.services.snooze import Snoozes
from uns_server.store.port import Store

log = logging.getLogger("uns.callbacks")
VIA_SLACK = "slack"
VIA_PAGERDUTY = "pagerduty"
SLACK_SNOOZE = "uns_snooze"
# A button's action_id -> the action its token must carry (Snooze: the Acknowledge token).
SLACK_ACTIONS = {"uns_ack": ACK, "uns_dismiss": DISMISS, SLACK_SNOOZE: ACK}
SNOOZED = "snoozed"
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
    snooze: bool = False


@dataclass(frozen=True)
class Snoozed:
    """What the message whose Snooze button was pressed shows now: who snoozed it until
    when, and buttons whose ``links`` are issued for the moved deadline (the pressed
    message's tokens expire with the deadline they were issued for)."""

    outcome: ObligationOutcome
    links: AnswerLinks


@dataclass(frozen=True)
class Pressed:
    """What a button press came to (for the log and tests), and for a press on an
    obligation that has ended, the note telling the presser (``settled_note``) of the
    row the answer was decided on."""

    outcome: str
    note: str | None = None
    snoozed: Snoozed | None = None


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
        acks: AckService,
        links_service: ActionLinkService,
        clock: Callable[[], datetime],
        snoozes: Snoozes | None = None,
    ) -> None:
        self._store = store
        self._acks = acks
        self._links = links_service
        self._clock = clock
        self._snoozes = snoozes  # None: Snooze buttons are not answered

    async def claim(self, receipt: Receipt) -> bool:
        """Insert the receipt of a callback that settles nothing (no button UNS
        signed, an incident UNS did not open); False if it is there already (a
        replay). A callback that settles writes its receipt in the settling
        transaction instead (``AckService.try_answer``)."""
        async with self._store.write() as tx:
            return await tx.receipts.record(receipt.digest, receipt.provider, self._clock())

    async def slack_target(self, action_id: str, token: str) -> Slack | None:
        """The notification and action a Block Kit button names; None if invalid."""
        snooze = action_id == SLACK_SNOOZE
        action = None if snooze and self._snoozes is None else SLACK_ACTIONS.get(action_id)
        claims = await self._links.verify(token) if action else None
        if action is None or claims is None or action not in claims.actions:
            return None
        return Slack(claims.notification_id, action == DISMISS, claims.recipient, snooze)

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
        if target.snooze:
            outcome, row = await self._snooze(
                target.notification_id, actor, VIA_SLACK, metadata, receipt
            )
        else:
            outcome, row = await self._settle(
                target.notification_id, actor, VIA_SLACK, target.dismiss, metadata, receipt
            )
        snoozed = None
        if outcome == SNOOZED and row is not None:
            snoozed = self._snoozed_message(row, actor, target.recipient)
        note = settled_note(row) if outcome in STALE_OUTCOMES else None
        return Pressed(outcome, note, snoozed)

    def _snoozed_message(self, row: Notification, actor: str, recipient: str) -> Snoozed:
        assert row.snoozed_until is not None and row.deadline is not None  # just snoozed
        shown = outcome_of(row, AckStatus.SNOOZED, actor, VIA_SLACK, row.snoozed_until)
        links = self._links.until(row.id, row.deadline)(recipient)
        return Snoozed(ObligationOutcome(**shown), links)

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
        return self._told(answer, nid, actor, via, "settled")

    async def _snooze(
        self,
        nid: str,
        actor: str,
        via: str,
        metadata: dict[str, str],
        receipt: Receipt | None,
    ) -> tuple[str, Notification | None]:
        """A Snooze button: ``snoozed``, or what an answer's refusal would be."""
        assert self._snoozes is not None  # only a snooze target when it is there
        answer = await self._snoozes.try_snooze_as(
            nid, actor=actor, via=via, duration=LINK_SNOOZE, metadata=metadata, receipt=receipt
        )
        return self._told(answer, nid, actor, via, SNOOZED)

    @staticmethod
    def _told(
        answer: Answer, nid: str, actor: str, via: str, done: str
    ) -> tuple[str, Notification | None]:
        """The outcome of ``answer`` (``done`` when it was taken) and its row."""
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
            extra={
                "notification_id": nid,
                "actor": actor,
                "via": via,
                "repeat": answer.repeat,
                "outcome": done,
            },
        )
        return ("repeat" if answer.repeat else done), answer.row

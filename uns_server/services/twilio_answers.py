"""Answers that come back through Twilio: an SMS reply, a key pressed on a call, and a
call that reached nobody (SPEC §7 "People reached anywhere").

The transport (``http.twilio``) has verified Twilio's signature with the auth token of
the channel it names; this service finds what the answer is about and settles it through
``AckService.try_answer`` (the same decision as Acknowledge) as the person, ``recipient:<id>``,
``via`` the channel type. Every callback carries a ``Receipt`` (replay protection,
written in the transaction that settles or records it), so a replayed one is processed
once.

* An SMS reply is found by its sender: the people whose contact on that channel is the
  ``From`` number, and among their open obligations the ones this channel texted them
  (a provider reference of the channel and the person). One owed answer settles with a
  bare ``ACK``; several need the answer code (``domain.twilio.answer_code``).
* A call's callbacks carry the person's signed action-link tokens; the notification must
  show this channel called this person (as a Slack press must show a Slack post).
* A call nobody answered (no key pressed, or a final status ``no-answer``, ``busy``,
  ``failed``, ``canceled``) is recorded as a failed CHANNEL_ATTEMPT_RESULT for the
  person (``not_reached``), after the accepted one: Twilio took the call, the person was
  not reached.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from uns_server.domain.enums import ACK_OWED, EventKind
from uns_server.domain.errors import AckConflict, AckDeadlinePassed
from uns_server.domain.links import DISMISS
from uns_server.domain.outcomes import ProviderRef
from uns_server.domain.records import Notification
from uns_server.domain.twilio import SmsAnswer, answer_code
from uns_server.services.acks import RECIPIENT_ACTOR, AckService, Receipt
from uns_server.services.action_links import ActionLinkService
from uns_server.services.provider_answers import settled_note
from uns_server.store.port import NewEvent, Store

log = logging.getLogger("uns.callbacks")
VIA_SMS = "twilio_sms"
VIA_VOICE = "twilio_voice"
REPLAYED = "replayed"
OWED_MAX = 50  # open obligations looked at per person (a person owes a handful)
PEOPLE_PAGE = 500
NOT_REACHED_STATUSES = frozenset({"no-answer", "busy", "failed", "canceled"})
_DONE = {False: "Acknowledged", True: "Dismissed"}
_NEVER = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Reply:
    """What a callback came to (for the log and tests) and what to tell the person."""

    outcome: str
    text: str = ""


@dataclass(frozen=True)
class Owed:
    """One answer a person owes, that this channel asked them for."""

    row: Notification
    recipient_id: str

    @property
    def code(self) -> str:
        return answer_code(self.row.id)


@dataclass(frozen=True)
class Call:
    """What a call's callback names: the notification, the person, the call's reference."""

    notification_id: str
    recipient_id: str
    key: str
    ref: ProviderRef


def _ref_for(row: Notification, channel: str, kind: str, rid: str) -> tuple[str, ProviderRef]:
    """The latest message of ``channel`` (of type ``kind``) to ``rid``, by its key; ("",
    empty) when none is recorded."""
    found = [
        (key, ref)
        for key, ref in (row.provider_refs or {}).items()
        if ref.channel_type == kind and (ref.channel or key) == channel and ref.recipient_id == rid
    ]
    found.sort(key=lambda item: (item[1].at is not None, item[1].at or _NEVER))
    return found[-1] if found else ("", ProviderRef.from_json({}))


def _title(row: Notification) -> str:
    doc = row.notification
    return doc.title or row.notification_type


class TwilioAnswers:
    def __init__(
        self,
        store: Store,
        acks: AckService,
        links: ActionLinkService,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._acks = acks
        self._links = links
        self._clock = clock

    async def _claim(self, receipt: Receipt) -> bool:
        """The receipt of a callback that settles nothing; False for a replay."""
        async with self._store.write() as tx:
            return await tx.receipts.record(receipt.digest, receipt.provider, self._clock())

    # SMS ---------------------------------------------------------------------------

    async def owed(self, channel: str, number: str) -> list[Owed] | None:
        """The answers the people with ``number`` on ``channel`` owe that this channel
        asked them for, oldest first; None when no person has that number there."""
        people: list[str] = []
        async with self._store.read() as tx:
            after: str | None = None
            while True:
                page = await tx.people.list_recipients(after=after, limit=PEOPLE_PAGE)
                for person in page:
                    if any(c.channel == channel and c.address == number for c in person.contacts):
                        people.append(person.recipient_id)
                if len(page) < PEOPLE_PAGE:
                    break
                after = page[-1].recipient_id
            if not people:
                return None
            out: list[Owed] = []
            for rid in people:
                ids = await tx.people.owing_notifications(rid, OWED_MAX)
                for nid in ids:
                    row = await tx.notifications.get(nid)
                    if row is None or row.ack_status not in (None, *ACK_OWED):
                        continue
                    if _ref_for(row, channel, VIA_SMS, rid)[0]:
                        out.append(Owed(row, rid))
        return sorted(out, key=lambda o: o.row.created_at)

    async def sms(
        self, channel: str, number: str, answer: SmsAnswer, receipt: Receipt, message_sid: str
    ) -> Reply:
        """Settle the answer an SMS reply gives, or say why it cannot."""
        owed = await self.owed(channel, number)
        if owed is None:
            return await self._told(receipt, "unknown_sender", "")
        chosen = [o for o in owed if o.code == answer.code] if answer.code else owed
        if not chosen:
            text = (
                f"No open notification has the code {answer.code}."
                if answer.code
                else "Nothing is waiting for your answer."
            )
            return await self._told(receipt, "nothing_owed", text)
        if len(chosen) > 1:
            listed = "; ".join(f"{o.code} {_title(o.row)[:40]}" for o in chosen[:5])
            return await self._told(
                receipt,
                "ambiguous",
                f"{len(chosen)} notifications wait for your answer: {listed}. "
                "Reply ACK <code> or DISMISS <code>.",
            )
        [one] = chosen
        metadata = {"twilio_message_sid": message_sid} if message_sid else {}
        return await self._settle(
            one.row, one.recipient_id, VIA_SMS, answer.dismiss, metadata, receipt
        )

    async def not_an_answer(self, channel: str, number: str, receipt: Receipt) -> Reply:
        """A reply that is no answer: say how to answer (codes when several are owed)."""
        owed = await self.owed(channel, number)
        if not owed:
            return await self._told(receipt, "not_an_answer", "")
        text = "Reply ACK or 1 to acknowledge, DISMISS or 2 to dismiss"
        if len(owed) > 1:
            text += ", with the code: " + "; ".join(
                f"{o.code} {_title(o.row)[:40]}" for o in owed[:5]
            )
        return await self._told(receipt, "not_an_answer", text + ".")

    async def _told(self, receipt: Receipt, outcome: str, text: str) -> Reply:
        if not await self._claim(receipt):
            return Reply(REPLAYED)
        return Reply(outcome, text)

    # Calls -------------------------------------------------------------------------

    async def call(self, channel: str, ack_token: str) -> Call | None:
        """The person's call a callback names (its ack link token), when this channel
        is recorded calling them for that notification; None otherwise."""
        claims = await self._links.verify(ack_token)
        if claims is None or not claims.recipient.startswith(RECIPIENT_ACTOR):
            return None
        rid = claims.recipient.removeprefix(RECIPIENT_ACTOR)
        async with self._store.read() as tx:
            row = await tx.notifications.get(claims.notification_id)
        if row is None:
            return None
        key, ref = _ref_for(row, channel, VIA_VOICE, rid)
        return Call(row.id, rid, key, ref) if key else None

    async def may_dismiss(self, call: Call, dismiss_token: str) -> bool:
        """Does ``dismiss_token`` offer dismissing this call's notification to its person?"""
        claims = await self._links.verify(dismiss_token)
        return (
            claims is not None
            and DISMISS in claims.actions
            and claims.notification_id == call.notification_id
            and claims.recipient == RECIPIENT_ACTOR + call.recipient_id
        )

    async def key_pressed(
        self, call: Call, dismiss: bool, receipt: Receipt, call_sid: str
    ) -> Reply:
        async with self._store.read() as tx:
            row = await tx.notifications.get(call.notification_id)
        if row is None:
            return await self._told(receipt, "not_pending", "")
        metadata = {"twilio_call_sid": call_sid} if call_sid else {}
        return await self._settle(row, call.recipient_id, VIA_VOICE, dismiss, metadata, receipt)

    async def not_reached(self, call: Call, status: str, receipt: Receipt, call_sid: str) -> Reply:
        """Record that the call did not reach the person (``status``: Twilio's final
        call status, or ``no-input`` when nobody pressed a key)."""
        now = self._clock()
        async with self._store.write() as tx:
            if not await tx.receipts.record(receipt.digest, receipt.provider, now):
                return Reply(REPLAYED)
            row = await tx.notifications.get(call.notification_id)
            if row is None:
                return Reply("not_pending")
            route = call.key.partition(":")[0]
            payload = {
                "channel": call.ref.channel or route,
                "route": route,
                "recipient_id": call.recipient_id,
                "attempt": call.ref.attempt,
                "cycle": call.ref.cycle,
                "success": False,
                "retryable": False,
                "not_reached": True,
                "message_id": call_sid or call.ref.message_id,
                "error": f"the call did not reach the person ({status})",
                "metadata": {"twilio_call_status": status},
                "provider_observed_at": now.isoformat(),
            }
            if call.ref.follow_up:
                payload["follow_up"] = call.ref.follow_up
                payload["follow_up_number"] = call.ref.follow_up_number
            kind = EventKind.CHANNEL_ATTEMPT_RESULT
            event = NewEvent(row.id, row.principal, row.notification_type, kind, payload)
            await tx.events.append([event], now)
        log.info(
            "call not answered",
            extra={"notification_id": row.id, "recipient_id": call.recipient_id, "status": status},
        )
        return Reply("not_reached")

    # Settling ----------------------------------------------------------------------

    async def _settle(
        self,
        row: Notification,
        rid: str,
        via: str,
        dismiss: bool,
        metadata: dict[str, str],
        receipt: Receipt,
    ) -> Reply:
        actor = RECIPIENT_ACTOR + rid
        answer = await self._acks.try_answer(
            row.id, actor=actor, via=via, dismiss=dismiss, metadata=metadata, receipt=receipt
        )
        if answer.replayed:
            return Reply(REPLAYED)
        title = _title(answer.row or row)
        if answer.refusal is None:
            outcome = "repeat" if answer.repeat else "settled"
            log.info(
                "answered from a provider",
                extra={"notification_id": row.id, "actor": actor, "via": via},
            )
            return Reply(outcome, f"{_DONE[dismiss]}: {title}")
        if isinstance(answer.refusal, AckConflict):
            outcome = "conflict"
        elif isinstance(answer.refusal, AckDeadlinePassed):
            outcome = "deadline_passed"
        else:
            outcome = "not_pending"
        note = settled_note(answer.row) or "This notification is not waiting for an answer."
        return Reply(outcome, f"{title}: {note}")

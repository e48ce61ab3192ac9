"""A Telegram button press (SPEC §7 "People reached anywhere"), settled through the ack
rules like any other answer.

The transport (``http.telegram``) has checked the channel's secret token. This service
trusts only what Telegram's servers fill in: the press is on a message UNS recorded
sending through *this* channel for the notification the button names (its chat id and
message id are in the notification's provider references), so a button cannot be
replayed against another notification, another chat or another bot. A press that
arrives before the attempt that sent its message was committed (its reference not yet
recorded: other channels of the attempt still answering) cannot be checked yet; the
person is told to press again (``sending``).

Who answers: the person the message was sent to (the reference's ``recipient_id``)
when the presser is them, that is when ``callback_query.from.id`` is the chat the
message went to (a private chat with the bot: a user's chat id is their user id) or is
one of that person's contacts on this channel; it settles as ``recipient:<id>``.
Anyone else pressing (a member of a group chat given as the contact) answers as
``telegram:<user id>``, the channel's identity, as a forwarded Slack button answers as
its Slack user. Either way ``via`` is ``telegram``.

The Snooze 30 min button snoozes as that same person (whoever may acknowledge may
snooze, SPEC §7); ``answerCallbackQuery`` tells them until when. The message keeps its
buttons: their data names no deadline, so they still answer after the snooze.

Each press (``callback_query.id``) is processed once: its receipt is written in the
transaction that settles it (or, for a press that settles nothing, on its own), so
Telegram redelivering the update changes nothing the second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC

from uns_server.domain.outcomes import ProviderRef, ProviderRefs
from uns_server.domain.records import Notification
from uns_server.domain.telegram_updates import DISMISS, SNOOZE, TelegramPress, parse_callback_data
from uns_server.services.acks import RECIPIENT_ACTOR, Receipt
from uns_server.services.provider_answers import (
    REPLAYED,
    SNOOZED,
    STALE_OUTCOMES,
    ProviderAnswers,
    receipt_digest,
    settled_note,
)

VIA_TELEGRAM = "telegram"
INVALID = "invalid"
SENDING = "sending"
_SETTLED_TEXT = {False: "Acknowledged.", True: "Dismissed."}
_REPEAT_TEXT = {
    False: "You had already acknowledged this.",
    True: "You had already dismissed this.",
}
_INVALID_TEXT = "This button does not answer a notification UNS sent to this chat."
_SENDING_TEXT = "UNS is still sending this notification: press again in a moment."
_CLOSED_TEXT = "This notification is no longer waiting for an answer."


@dataclass(frozen=True)
class TelegramAnswer:
    """What a press came to (for the log and tests) and the text ``answerCallbackQuery``
    shows the presser."""

    outcome: str
    text: str


def _sent_message(refs: ProviderRefs, channel: str, press: TelegramPress) -> ProviderRef | None:
    """The reference of the message pressed on, if UNS sent it through ``channel``."""
    for ref in refs.values():
        if (
            ref.channel == channel
            and ref.channel_type == VIA_TELEGRAM
            and ref.provider_field("telegram_chat_id") == str(press.chat_id)
            and ref.provider_field("telegram_message_id") == str(press.message_id)
        ):
            return ref
    return None


class TelegramAnswers(ProviderAnswers):
    """``ProviderAnswers`` for Telegram's ``callback_query``."""

    async def telegram_press(self, channel: str, press: TelegramPress) -> TelegramAnswer:
        """Settle ``press`` (verified as ``channel``'s); ``replayed`` when it was
        processed before."""
        receipt = Receipt(
            receipt_digest(VIA_TELEGRAM, f"{channel}|{press.callback_id}".encode()), VIA_TELEGRAM
        )
        target = parse_callback_data(press.data)
        if target is not None and target[1] == SNOOZE and self._snoozes is None:
            target = None  # no snoozes here: not a button this server answers
        row = None
        if target is not None and press.message_id:
            async with self._store.read() as tx:
                row = await tx.notifications.get(target[0])
        sent = _sent_message(row.provider_refs or {}, channel, press) if row else None
        if target is None or sent is None:
            if not await self.claim(receipt):
                return TelegramAnswer(REPLAYED, "")
            if row is not None and (row.lease_token or row.followup_lease_token):
                # Its message reached the chat before the attempt that sent it was
                # committed (other channels of the attempt still answering): its
                # reference is not recorded yet, so the press cannot be checked yet.
                return TelegramAnswer(SENDING, _SENDING_TEXT)
            return TelegramAnswer(INVALID, _INVALID_TEXT)
        nid, answer = target
        dismiss = answer == DISMISS
        actor = f"telegram:{press.user_id}"
        person = sent.recipient_id
        if person and (
            press.user_id == press.chat_id
            or await self._contact_on(person, channel, str(press.user_id))
        ):
            actor = RECIPIENT_ACTOR + person
        metadata = {
            k: v
            for k, v in (
                ("telegram_user_id", str(press.user_id)),
                ("telegram_username", press.username),
            )
            if v
        }
        if answer == SNOOZE:
            outcome, row = await self._snooze(nid, actor, VIA_TELEGRAM, metadata, receipt)
        else:
            outcome, row = await self._settle(nid, actor, VIA_TELEGRAM, dismiss, metadata, receipt)
        if outcome == SNOOZED:
            text = _snoozed_text(row)
        elif outcome == "settled":
            text = _SETTLED_TEXT[dismiss]
        elif outcome == "repeat":
            text = _REPEAT_TEXT[dismiss]
        elif outcome in STALE_OUTCOMES:
            text = settled_note(row) or _CLOSED_TEXT
        else:
            text = ""
        return TelegramAnswer(outcome, text)

    async def _contact_on(self, recipient_id: str, channel: str, address: str) -> bool:
        """Is ``address`` one of the person's contacts on ``channel``?"""
        async with self._store.read() as tx:
            person = await tx.people.get_recipient(recipient_id)
        return person is not None and any(
            c.channel == channel and c.address == address for c in person.contacts
        )


def _snoozed_text(row: Notification | None) -> str:
    """``answerCallbackQuery``'s text for a press that snoozed."""
    until = row.snoozed_until if row is not None else None
    if until is None:  # just snoozed: always set
        return "Snoozed."
    at = until.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
    return f"Snoozed until {at} UTC; the answer is still owed."

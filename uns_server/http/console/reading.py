"""How the console words what it shows: a notification's state as an operator reads it
(a delivery still owed an answer is waiting, not done), people by their display names
(their id kept beside), and the follow-up steps of the timeline (who was asked, on
which channel, with what result)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from markupsafe import Markup, escape

from uns_server.domain.enums import AckStatus, EventKind, Status
from uns_server.domain.people import Recipient
from uns_server.domain.schedule.quiet_hours import next_allowed
from uns_server.services.acks import RECIPIENT_ACTOR

# The acknowledgement as a person says it, and the class that colours it.
ACK_WORDS = {
    AckStatus.PENDING: ("waiting for an answer", "s-waiting"),
    AckStatus.ACKED: ("acknowledged", "s-delivered"),
    AckStatus.DISMISSED: ("dismissed", "s-quiet"),
    AckStatus.TIMED_OUT: ("not answered in time", "s-failed"),
    AckStatus.WITHDRAWN: ("withdrawn", "s-quiet"),
    AckStatus.SNOOZED: ("snoozed: still waiting for an answer", "s-waiting"),
}
_DECISIONS = {
    "SENT": "sent",
    "GAVE_UP": "gave up",
    "SKIPPED": "skipped: nobody was due",
    "STOPPED": "stopped: answered before it went out",
}
# Payload lists whose items name a person (REMINDER_SENT, ESCALATED).
_PEOPLE_LISTS = ("results", "recipients_unreachable", "recipients_held", "recipients_not_due")


@dataclass(frozen=True)
class StateLabel:
    text: str
    css: str
    stored: str  # the stored states, as the filter language names them (the title)
    reworded: bool = False  # the text is not the stored state: show that beside it


def state_label(status: str, dead_letter: bool, ack_status: str | None) -> StateLabel:
    """A DELIVERED notification whose ack is PENDING is *waiting for an answer*, not
    green; one answered reads as its answer."""
    stored = f"state {status}" + (f", ack_state {ack_status}" if ack_status else "")
    if status == Status.DELIVERED and ack_status in ACK_WORDS:
        text, css = ACK_WORDS[AckStatus(ack_status)]
        return StateLabel(text[0].upper() + text[1:], css, stored, reworded=True)
    css = {Status.DELIVERED: "s-delivered", Status.FAILED: "s-failed"}.get(Status(status), "")
    return StateLabel(status + (" · dead letter" if dead_letter else ""), css, stored)


def ack_words(ack_status: str | None) -> str:
    if ack_status in ACK_WORDS:
        return ACK_WORDS[AckStatus(ack_status)][0]
    return ack_status or "not required"


def recipient_ids_in(actors: Iterable[str | None], payloads: Iterable[Any]) -> set[str]:
    """The people named by actors (``recipient:<id>``) and by event payloads."""
    ids = {a.removeprefix(RECIPIENT_ACTOR) for a in actors if a and a.startswith(RECIPIENT_ACTOR)}
    for p in payloads:
        if not isinstance(p, dict):
            continue
        ids.update(_actor_ids(p.get("actor")))
        if isinstance(p.get("recipient_id"), str):
            ids.add(p["recipient_id"])
        ids.update(r for r in p.get("recipient_ids") or () if isinstance(r, str))
        for key in _PEOPLE_LISTS:
            for item in p.get(key) or ():
                if isinstance(item, dict) and isinstance(item.get("recipient_id"), str):
                    ids.add(item["recipient_id"])
    ids.discard("")
    return ids


def _actor_ids(actor: object) -> set[str]:
    if isinstance(actor, str) and actor.startswith(RECIPIENT_ACTOR):
        return {actor.removeprefix(RECIPIENT_ACTOR)}
    return set()


@dataclass(frozen=True)
class Names:
    """People by id (those that still exist): display names, zones, quiet hours."""

    people: Mapping[str, Recipient]

    def text(self, recipient_id: str) -> str:
        """``Dave Okafor (dave)``; an unknown (deleted) person by id alone."""
        person = self.people.get(recipient_id)
        return f"{person.display_name} ({recipient_id})" if person else recipient_id

    def actor_text(self, actor: str | None) -> str:
        if actor and actor.startswith(RECIPIENT_ACTOR):
            return self.text(actor.removeprefix(RECIPIENT_ACTOR))
        return actor or "?"

    def html(self, recipient_id: str) -> Markup:
        """The name, the id in the title and in small text after it."""
        person = self.people.get(recipient_id)
        rid = escape(recipient_id)
        if person is None:
            return Markup(f'<span class="person" title="recipient:{rid}">{rid}</span>')
        return Markup(
            f'<span class="person" title="recipient:{rid}">{escape(person.display_name)}'
            f' <small class="muted">{rid}</small></span>'
        )

    def actor_html(self, actor: str | None) -> Markup:
        if actor and actor.startswith(RECIPIENT_ACTOR):
            return self.html(actor.removeprefix(RECIPIENT_ACTOR))
        return Markup(escape(actor or "—"))

    def local(self, recipient_id: str, value: datetime | str | None) -> str:
        """A time in the zone of the person's quiet hours (their own zone without), with
        the zone named and UTC beside: ``2026-12-07 07:00 Asia/Tokyo (22:00 UTC)``."""
        try:
            at = datetime.fromisoformat(value) if isinstance(value, str) else value
        except ValueError:  # not written by UNS: shown as it is
            return str(value)
        if not isinstance(at, datetime):
            return "?"
        person = self.people.get(recipient_id)
        zone = "UTC"
        if person is not None:
            zone = person.quiet_hours.time_zone if person.quiet_hours else person.time_zone
        local = at.astimezone(ZoneInfo(zone))
        utc = at.astimezone(UTC)
        if zone == "UTC":
            return local.strftime("%Y-%m-%d %H:%M UTC")
        return f"{local:%Y-%m-%d %H:%M} {zone} ({utc:%H:%M} UTC)"

    def held_until(self, recipient_id: str, now: datetime) -> datetime | None:
        """Until when the person's own quiet hours hold their messages (None: awake).
        SAFETY and ESCALATION notifications are never held."""
        person = self.people.get(recipient_id)
        if person is None or person.quiet_hours is None:
            return None
        until = next_allowed(now, person.quiet_hours, None)
        return until if until > now else None


def step_summary(kind: str, p: Mapping[str, Any], names: Names) -> str:
    """A REMINDER_SENT or ESCALATED row: whom it asked, on which channel, what each
    answered; who it could not reach, who it let sleep, who was not due."""
    if kind == EventKind.REMINDER_SENT and p.get("follow_up") == "SNOOZE_REMINDER":
        label = f"reminder at the end of snooze {p.get('snooze', '?')}"
    elif kind == EventKind.REMINDER_SENT:
        label = f"reminder {p.get('number', '?')}"
    else:
        label = f"escalation step {p.get('step', '?')}"
    decision = str(p.get("decision") or "")
    parts = []
    for r in p.get("results") or ():
        if not isinstance(r, dict):
            continue
        where = str(r.get("channel") or "?")
        rid = r.get("recipient_id")
        to = f"to {names.text(rid)} on {where}" if isinstance(rid, str) else f"on {where}"
        ok = "sent" if r.get("success") else f"failed: {r.get('error') or 'unknown error'}"
        parts.append(f"{to}: {ok}")
    for u in _items(p, "recipients_unreachable"):
        parts.append(f"{names.text(u['recipient_id'])} not reached: {u.get('reason') or '?'}")
    for h in _items(p, "recipients_held"):
        rid = h["recipient_id"]
        until = names.local(rid, h.get("held_until"))
        parts.append(f"{names.text(rid)} held by their quiet hours until {until}")
    for d in _items(p, "recipients_not_due"):
        parts.append(f"{names.text(d['recipient_id'])} not due a reminder yet")
    head = f"{label}, {_DECISIONS.get(decision, decision.lower())}" if decision else label
    return head + (": " + "; ".join(parts) if parts else "")


def _items(p: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    return [
        i
        for i in p.get(key) or ()
        if isinstance(i, dict) and isinstance(i.get("recipient_id"), str)
    ]

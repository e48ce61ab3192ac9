"""What a claim hands a delivery (``Claim``), what one provider call answered
(``Attempt``), and the events a claim commits before any provider I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from uns_server.channels.base import ChannelResult
from uns_server.domain.enums import EventKind
from uns_server.store.events import NewEvent
from uns_server.store.pg import Row


@dataclass(frozen=True)
class Claim:
    row: Row  # as it was before the claim (a recovered lease still shows its token)
    token: str
    attempt: int
    cycle_attempt: int
    channels: tuple[str, ...]  # still to deliver in this cycle


@dataclass(frozen=True)
class Attempt:
    channel: str
    result: ChannelResult
    observed_at: datetime


def attempt_base(claim: Claim) -> dict[str, Any]:
    """The attempt numbers every event of one attempt carries."""
    return {
        "attempt": claim.attempt,
        "cycle": claim.row["cycle"],
        "cycle_attempt": claim.cycle_attempt,
    }


def remaining_channels(row: Row) -> tuple[str, ...]:
    """The row's channels that have not accepted it in this cycle."""
    done = set(row["outcome"].get("channels_succeeded", []))
    return tuple(ch for ch in row["notification"]["effective"]["channels"] if ch not in done)


def claim_events(claim: Claim, *, recovered: bool) -> list[NewEvent]:
    """What a claim commits before any provider I/O: ATTEMPT_STARTED, and one
    CHANNEL_ATTEMPT_STARTED per channel still to deliver."""
    row = claim.row
    base = attempt_base(claim)
    started = event(
        row, EventKind.ATTEMPT_STARTED, {**base, "recovery_may_repeat_provider_effect": recovered}
    )
    return [started] + [
        event(
            row,
            EventKind.CHANNEL_ATTEMPT_STARTED,
            {
                **base,
                "channel": ch,
                "lease_token": claim.token,
                "provider_effect_may_have_occurred": True,
            },
        )
        for ch in claim.channels
    ]


def event(row: Row, kind: EventKind, payload: dict[str, Any]) -> NewEvent:
    return NewEvent(row["id"], row["principal"], row["notification_type"], kind, payload)

"""Why a PENDING notification has not been delivered yet, in one sentence for the
notification page: following a leader, leased, scheduled, or due but naming a
channel this server lacks (SPEC §6: work no replica delivers says why)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from uns_server.domain.enums import Status
from uns_server.domain.records import Notification


@dataclass(frozen=True)
class Waiting:
    text: str
    stuck: bool  # nothing will move it without an operator (or a configuration change)
    missing: tuple[str, ...] = ()


def _ago(now: datetime, then: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 172800:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} days"


def why_waiting(row: Notification, channels: Collection[str], now: datetime) -> Waiting | None:
    """``None`` unless the notification is PENDING."""
    if row.status != Status.PENDING:
        return None
    if row.dedup_owner_id is not None:
        return Waiting(
            f"Following {row.dedup_owner_id} (same dedup key): it is delivered, or "
            "promoted to a leader, with that notification.",
            stuck=False,
        )
    if row.lease_until is not None and row.lease_until > now:
        return Waiting(
            f"Being delivered: a dispatcher holds it until {row.lease_until:%H:%M:%S} UTC.",
            stuck=False,
        )
    named = row.notification.effective.channels
    missing = tuple(c for c in dict.fromkeys(named) if c not in channels)
    if row.next_attempt > now:
        retry = "retry" if row.attempts else "first attempt"
        text = f"Scheduled: {retry} at {row.next_attempt:%Y-%m-%d %H:%M:%S} UTC."
        if missing:
            text += f" This server has no channel {', '.join(missing)}."
        return Waiting(text, stuck=False, missing=missing)
    if missing:
        have = ", ".join(sorted(channels)) or "none"
        return Waiting(
            f"Due for {_ago(now, row.next_attempt)} but not delivered: its policy names "
            f"the channel {', '.join(missing)}, which this server does not have (it has "
            f"{have}), and no replica that has it has claimed it. Configure the channel, "
            "or withdraw the notification.",
            stuck=True,
            missing=missing,
        )
    return Waiting(
        f"Due for {_ago(now, row.next_attempt)}: waiting for a free dispatcher.", stuck=False
    )

"""``Notification.recipients`` (SPEC §6) on the wire, from ``domain.targets.people_sent``,
with each person's staged rules (SPEC §7)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from uns.v1 import types_pb2 as t
from uns_server.domain.outcomes import DeliveryOutcome, ProviderRef, ProviderRefs
from uns_server.domain.staged_rules import shown_state
from uns_server.domain.targets import people_sent


def recipients(
    outcome: DeliveryOutcome,
    refs: ProviderRefs,
    reference: Callable[[ProviderRef], t.ProviderReference],
    owed: bool = True,
) -> list[t.NotificationRecipient]:
    """``owed``: the answer is still awaited (a rule not fired yet may still fire)."""
    return [
        t.NotificationRecipient(
            recipient_id=p.recipient_id,
            channels_tried=p.channels_tried,
            channels_accepted=p.channels_accepted,
            provider_references=[reference(r) for r in p.references],
            reminders_sent=p.reminders_sent,
            unreachable_reason=p.unreachable_reason,
            staged_rules=[staged_rule(e, owed) for e in p.staged],
        )
        for p in people_sent(outcome, refs)
    ]


def staged_rule(entry: Mapping[str, Any], owed: bool) -> t.StagedRule:
    after = duration_pb2.Duration()
    after.FromTimedelta(timedelta(seconds=int(entry.get("after_seconds") or 0)))
    msg = t.StagedRule(
        channel=str(entry.get("channel") or ""),
        after=after,
        state=t.StagedRuleState.Value(f"STAGED_RULE_STATE_{shown_state(entry, owed)}"),
        error=str(entry.get("error") or ""),
    )
    for name, key in (("due_time", "due_time"), ("fire_time", "fire_time")):
        value = entry.get(key)
        if value:
            ts = timestamp_pb2.Timestamp()
            ts.FromDatetime(datetime.fromisoformat(str(value)))
            getattr(msg, name).CopyFrom(ts)
    return msg

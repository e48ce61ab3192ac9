"""The ``uns_notifications`` row an admitted SendNotification becomes.

Intake (``services.intake``) decides; this only lays the answer out as the row it
inserts: the notification document (the request as accepted, its frozen effective
policy, the accepting span's trace context) and every column's first value.
"""

from __future__ import annotations

from datetime import datetime

from uns_server.domain.admission import Admit
from uns_server.domain.documents import NotificationDocument
from uns_server.domain.requests import SendRequest


def notification_row(
    principal: str,
    req: SendRequest,
    key: str,
    fingerprint: str,
    trace_context: dict[str, str],
    admission: Admit,
    *,
    now: datetime,
    first_attempt: datetime,
) -> dict[str, object]:
    """The ``uns_notifications`` row of an admitted request."""
    effective, status = admission.effective, admission.status
    document = NotificationDocument.accepted(req, effective, trace_context).to_json()
    return {
        "id": admission.notification_id,
        "key": key,
        "fingerprint": fingerprint,
        "principal": principal,
        "notification_type": req.notification_type,
        "source": req.source,
        "notification": document,
        "status": status.value,
        "priority": effective.priority.rank,
        "delivery_mode": effective.delivery_mode.value,
        "require_ack": effective.require_ack,
        "max_attempts": effective.max_attempts,
        "outcome": {
            "channels_attempted": [],
            "channels_succeeded": [],
            "channels_failed": [],
            "error_message": None,
        },
        "attempts": 0,
        "cycle": 1,
        "cycle_attempts": 0,
        "dedup_key": admission.dedup_key,
        "dedup_owner_id": admission.owner_id,
        "dedup_generation": admission.generation,
        "dedup_successor_id": None,
        "next_attempt": first_attempt,
        "lease_until": None,
        "lease_token": None,
        "provider_effect_may_have_occurred": False,
        "dead_letter": False,
        "delivered_at": None,
        "deadline": None,
        "ack_status": None,
        "actor": None,
        "responded_at": None,
        "response_metadata": None,
        "provider_refs": None,
        "created_at": now,
        "updated_at": now,
        "withdrawn_at": None,
        "withdrawn_by": None,
        "withdraw_reason": None,
        # Looked at by the follow-up worker once its ack is PENDING (after delivery).
        "followup_at": now if effective.spec.timing.follows_up else None,
        "followup_lease_token": None,
        "followup_lease_until": None,
        "reminders_sent": 0,
        "escalations_sent": 0,
        "followup_step": None,
    }

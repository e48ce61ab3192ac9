"""The notification an admitted SendNotification becomes.

Intake (``services.intake``) decides; this only lays the answer out as the record it
inserts (``domain.records.Notification``, written as its row by the store): the
notification document (the request as accepted, its frozen effective policy, the
accepting span's trace context) and every column's first value.
"""

from __future__ import annotations

from datetime import datetime

from uns_server.domain.admission import Admit
from uns_server.domain.documents import NotificationDocument
from uns_server.domain.maintenance import MaintenanceWindow
from uns_server.domain.outcomes import DeliveryOutcome
from uns_server.domain.records import Notification
from uns_server.domain.requests import SendRequest

_NO_ATTEMPT = DeliveryOutcome()  # frozen: every new notification shares it


def new_notification(
    principal: str,
    req: SendRequest,
    key: str,
    fingerprint: str,
    trace_context: dict[str, str],
    admission: Admit,
    *,
    now: datetime,
    first_attempt: datetime,
    hold: MaintenanceWindow | None = None,
) -> Notification:
    """The notification of an admitted request, as it is inserted."""
    effective = admission.effective
    return Notification(
        id=admission.notification_id,
        key=key,
        fingerprint=fingerprint,
        principal=principal,
        notification_type=req.notification_type,
        source=req.source,
        notification=NotificationDocument.accepted(req, effective, trace_context),
        status=admission.status,
        priority=effective.priority.rank,
        delivery_mode=effective.delivery_mode,
        require_ack=effective.require_ack,
        max_attempts=effective.max_attempts,
        outcome=_NO_ATTEMPT,
        attempts=0,
        cycle=1,
        cycle_attempts=0,
        dedup_key=admission.dedup_key,
        dedup_owner_id=admission.owner_id,
        dedup_generation=admission.generation,
        dedup_successor_id=None,
        next_attempt=first_attempt,
        lease_until=None,
        lease_token=None,
        provider_effect_may_have_occurred=False,
        dead_letter=False,
        delivered_at=None,
        deadline=None,
        ack_status=None,
        actor=None,
        responded_at=None,
        response_metadata=None,
        created_at=now,
        updated_at=now,
        provider_refs=None,
        withdrawn_at=None,
        withdrawn_by=None,
        withdraw_reason=None,
        # Looked at by the follow-up worker once its ack is PENDING (after delivery).
        followup_at=now if effective.spec.timing.follows_up else None,
        followup_lease_token=None,
        followup_lease_until=None,
        reminders_sent=0,
        escalations_sent=0,
        followup_step=None,
        # A maintenance window open at acceptance holds it (``first_attempt`` its end).
        held_until=None if hold is None else hold.end_time,
        held_by_window_id=None if hold is None else hold.window_id,
    )

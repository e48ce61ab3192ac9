"""What scripts/openapi.py cannot read from the descriptors: which fields the server
refuses when missing, and a valid request for the main calls.

The protos do not use ``google.api.field_behavior``, so REQUIRED is kept by hand, each
rule with where the server enforces it (the proto comment of every one of these fields
says "Required." too). A field is listed only when leaving it out (or at its default:
proto3 JSON cannot tell the two apart) is refused with INVALID_REQUEST naming it;
tests/http/test_openapi_document.py sends each request without them and checks that.
The same schemas describe answers, where these fields are always set (the server stored
them only after these checks).

EXAMPLES are OpenAPI ``examples`` of request bodies: each is accepted (200) by a fresh
server, as the producer or as the operator, and schemathesis starts from them
(tests/acceptance/test_openapi_fuzz.py checks both).
"""

from __future__ import annotations

from typing import Any

_VALIDATION = "uns_server/domain/validation.py"
_NOTIFICATION_ID = f"{_VALIDATION} validate_notification_id"
_POLICY = "uns_server/domain/policy/spec.py"
_PEOPLE = "uns_server/domain/people.py"
_KEYS = "uns_server/services/keys.py"
_POLICY_TYPE = "uns_server/services/policies.py validate_type"
_QUIET = "uns_server/domain/schedule/quiet_hours.py"
_STEPS = "uns_server/domain/schedule/follow_up_steps.py"
_HEARTBEATS = "uns_server/domain/heartbeats.py"

REQUIRED: dict[str, dict[str, str]] = {
    "uns.v1.SendNotificationRequest": {
        "notification_type": f"{_VALIDATION} validate_send (_notification_type)",
        "intent": f"{_VALIDATION} validate_send (UNSPECIFIED is missing)",
        "title": f"{_VALIDATION} validate_send (text_problems required)",
        "message": f"{_VALIDATION} validate_send (text_problems required)",
        "source": f"{_VALIDATION} validate_send (text_problems required)",
    },
    "uns.v1.GetNotificationRequest": {"notification_id": _NOTIFICATION_ID},
    "uns.v1.AcknowledgeRequest": {"notification_id": _NOTIFICATION_ID},
    "uns.v1.ReplayRequest": {"notification_id": _NOTIFICATION_ID},
    "uns.v1.ResolveFailureRequest": {"notification_id": _NOTIFICATION_ID},
    "uns.v1.WithdrawNotificationRequest": {"notification_id": _NOTIFICATION_ID},
    "uns.v1.ListDeliveryAuditRecordsRequest": {"notification_id": _NOTIFICATION_ID},
    "uns.v1.ListAckAuditRecordsRequest": {"notification_id": _NOTIFICATION_ID},
    "uns.v1.SimulateRequest": {"request": f"{_VALIDATION} validate_send (request.*)"},
    "uns.v1.CreateApiKeyRequest": {
        "principal": f"{_KEYS} (must not be empty)",
        "roles": f"{_KEYS} (at least one role)",
    },
    "uns.v1.RevokeApiKeyRequest": {"key": f"{_KEYS} revoke (a key id or prefix)"},
    "uns.v1.ActivatePolicyRevisionRequest": {"notification_type": _POLICY_TYPE},
    "uns.v1.GetPolicyRequest": {"notification_type": _POLICY_TYPE},
    "uns.v1.ListPolicyRevisionsRequest": {"notification_type": _POLICY_TYPE},
    "uns.v1.PutPolicyRevisionRequest": {
        "notification_type": _POLICY_TYPE,
        "spec": f"{_POLICY} PolicySpec.build (an absent spec has no delivery_mode)",
    },
    "uns.v1.PolicySpec": {"delivery_mode": f"{_POLICY} PolicySpec.build"},
    "uns.v1.QuietHours": {
        "time_zone": f"{_QUIET} QuietHours.parse",
        "start": f"{_QUIET} QuietHours.parse (HH:MM)",
        "end": f"{_QUIET} QuietHours.parse (HH:MM)",
    },
    "uns.v1.Reminder": {
        "first_after": f"{_STEPS} reminder_violations (1s to 7 days)",
        "max_count": f"{_STEPS} reminder_violations (1 to 20)",
    },
    "uns.v1.EscalationStep": {"after": f"{_POLICY} (positive, before the ack deadline)"},
    "uns.v1.PutRecipientRequest": {"recipient": f"{_PEOPLE} build_recipient"},
    "uns.v1.Recipient": {
        "recipient_id": f"{_PEOPLE} id_problems",
        "display_name": f"{_PEOPLE} build_recipient (text_problems required)",
        "time_zone": f"{_PEOPLE} build_recipient (zone_problem)",
    },
    "uns.v1.Contact": {
        "channel": f"{_PEOPLE} build_recipient (text_problems required)",
        "address": f"{_PEOPLE} build_recipient (text_problems required)",
    },
    "uns.v1.PutRotationRequest": {"rotation": f"{_PEOPLE} build_rotation"},
    "uns.v1.Rotation": {
        "rotation_id": f"{_PEOPLE} id_problems",
        "members": f"{_PEOPLE} build_rotation (at least one member)",
        "start_time": f"{_PEOPLE} build_rotation",
        "shift": f"{_PEOPLE} build_rotation",
        "time_zone": f"{_PEOPLE} build_rotation (zone_problem)",
    },
    "uns.v1.RotationOverride": {
        "recipient_id": f"{_PEOPLE} build_rotation (id_problems)",
        "start_time": f"{_PEOPLE} build_rotation",
        "end_time": f"{_PEOPLE} build_rotation",
    },
    "uns.v1.GetRecipientRequest": {"recipient_id": f"{_PEOPLE} check_id"},
    "uns.v1.DeleteRecipientRequest": {"recipient_id": f"{_PEOPLE} check_id"},
    "uns.v1.GetRotationRequest": {"rotation_id": f"{_PEOPLE} check_id"},
    "uns.v1.DeleteRotationRequest": {"rotation_id": f"{_PEOPLE} check_id"},
    "uns.v1.GetOnCallRequest": {"rotation_id": f"{_PEOPLE} check_id"},
    "uns.v1.PutHeartbeatRequest": {"heartbeat": f"{_HEARTBEATS} build_heartbeat"},
    "uns.v1.HeartbeatMonitor": {
        "heartbeat_id": f"{_HEARTBEATS} build_heartbeat (id_problems)",
        "notification_type": f"{_HEARTBEATS} build_heartbeat (validate_send)",
        "interval": f"{_HEARTBEATS} build_heartbeat (_period)",
        "title": f"{_HEARTBEATS} build_heartbeat (validate_send)",
        "message": f"{_HEARTBEATS} build_heartbeat (validate_send)",
    },
    "uns.v1.GetHeartbeatRequest": {"heartbeat_id": f"{_PEOPLE} check_id"},
    "uns.v1.DeleteHeartbeatRequest": {"heartbeat_id": f"{_PEOPLE} check_id"},
    "uns.v1.BeatRequest": {"heartbeat_id": f"{_PEOPLE} check_id"},
}
"""Message full name -> {proto field name: where the server refuses it when missing}."""

_SEND: dict[str, Any] = {
    "notificationType": "demo.alert",
    "intent": "NOTIFICATION_INTENT_WARNING",
    "title": "Disk almost full",
    "message": "92% used on db-1",
    "source": "disk-monitor",
    "idempotencyKey": "disk-db1-2026-11-29",
    "requireAck": True,
    "metadata": {"host": "db-1", "used_percent": 92},
}

EXAMPLES: dict[str, dict[str, Any]] = {
    "uns.v1.NotificationService/SendNotification": {"disk": _SEND},
    "uns.v1.NotificationService/Simulate": {"disk": {"request": _SEND}},
    "uns.v1.NotificationService/BatchSendNotifications": {
        "two": {
            "requests": [
                {**_SEND, "idempotencyKey": "batch-db1"},
                {**_SEND, "title": "Disk almost full on db-2", "idempotencyKey": "batch-db2"},
            ]
        }
    },
    "uns.v1.NotificationService/ListNotifications": {
        "dead letters": {"filter": "state = FAILED AND dead_letter = true", "pageSize": 50}
    },
    "uns.v1.PolicyService/PutPolicyRevision": {
        "ops": {
            "notificationType": "ops.disk",
            "spec": {
                "channels": ["log"],
                "deliveryMode": "DELIVERY_MODE_GUARANTEED",
                "requireAck": True,
                "ackTimeoutMinutes": 30,
                "reminder": {"firstAfter": "600s", "multiplier": 2, "maxCount": 3},
            },
        }
    },
    "uns.v1.RecipientService/PutRecipient": {
        "alice": {
            "recipient": {
                "recipientId": "alice",
                "displayName": "Alice Martin",
                "timeZone": "Europe/Paris",
                "quietHours": {"timeZone": "Europe/Paris", "start": "22:00", "end": "07:00"},
            }
        }
    },
    "uns.v1.RecipientService/ListRecipients": {"first page": {"pageSize": 50}},
    "uns.v1.HeartbeatService/PutHeartbeat": {
        "nightly backup": {
            "heartbeat": {
                "heartbeatId": "nightly-backup",
                "notificationType": "demo.alert",
                "interval": "86400s",
                "grace": "1800s",
                "title": "The nightly backup did not run",
                "message": "No beat from backup.sh on db-1 within a day and half an hour.",
            }
        }
    },
    "uns.v1.KeyService/CreateApiKey": {
        "producer": {"principal": "billing", "roles": ["ROLE_PRODUCER"]},
    },
}
"""``/uns.v1.Service/Method`` path (without the slash) -> {example name: request JSON}."""

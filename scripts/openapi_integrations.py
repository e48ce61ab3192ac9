"""The HTTP routes of scripts/openapi.py's document that are not gRPC methods: their
path items and schemas, written by hand (their handlers are in uns_server/http/).

``POST /integrations/alertmanager`` (uns_server/http/alertmanager.py, SPEC §7 "Alerts
in"): Alertmanager's webhook payload (Grafana's contact point posts the same shape) in,
one result per alert out. The payload's schema admits fields UNS does not read, since
Alertmanager and Grafana add some over time; tests/http/test_openapi_document.py sends the
example and checks every answer against these schemas.

``POST /heartbeats/{heartbeat_id}`` (uns_server/http/heartbeats.py): a beat from curl in
a cron job, answered as HeartbeatService.Beat (tests/http/test_heartbeats_http.py).
"""

from __future__ import annotations

from typing import Any

_TEXT_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_REFUSAL = {"$ref": "#/components/schemas/connect.error"}

SCHEMAS: dict[str, Any] = {
    "alertmanager.Webhook": {
        "type": "object",
        "description": (
            "Alertmanager's webhook payload (webhook_configs), version 4; Grafana's "
            "contact-point webhook sends the same shape as version 1, with fields of its "
            "own (orgId, state, title, message...), which are ignored like every field "
            "not listed here."
        ),
        "properties": {
            "version": {"type": "string", "enum": ["4", "1"]},
            "groupKey": {"type": "string"},
            "truncatedAlerts": {"type": "integer"},
            "status": {"type": "string", "enum": ["firing", "resolved"]},
            "receiver": {"type": "string"},
            "groupLabels": _TEXT_MAP,
            "commonLabels": _TEXT_MAP,
            "commonAnnotations": _TEXT_MAP,
            "externalURL": {"type": "string"},
            "alerts": {
                "type": "array",
                "maxItems": 1000,
                "items": {"$ref": "#/components/schemas/alertmanager.Alert"},
            },
        },
        "required": ["version", "alerts"],
    },
    "alertmanager.Alert": {
        "type": "object",
        "description": (
            "One alert: one notification. notificationType from the type query "
            "parameter, else the uns_type label; title the summary annotation, else the "
            "alertname label; message the description annotation, else the labels as "
            "k=v lines; metadata the labels; source alertmanager; idempotency key "
            "fingerprint@startsAt; dedup key the fingerprint. A resolved alert withdraws "
            "the notification of the same fingerprint and startsAt."
        ),
        "properties": {
            "status": {"type": "string", "enum": ["firing", "resolved"]},
            "labels": _TEXT_MAP,
            "annotations": _TEXT_MAP,
            "startsAt": {"type": "string", "minLength": 1, "maxLength": 64},
            "endsAt": {"type": "string"},
            "generatorURL": {"type": "string"},
            "fingerprint": {"type": "string", "minLength": 1, "maxLength": 128},
        },
        "required": ["status", "labels", "startsAt", "fingerprint"],
    },
    "alertmanager.Results": {
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "description": "One result per alert, in the payload's order.",
                "items": {"$ref": "#/components/schemas/alertmanager.Result"},
            }
        },
        "required": ["results"],
        "additionalProperties": False,
    },
    "alertmanager.Result": {
        "type": "object",
        "description": (
            "A firing alert: notificationId, idempotentReplay and state (a replay also "
            "when only the alert's text changed: note says so). A resolved alert: "
            "withdrawn, with notificationId, state and ackState when it withdrew one, or "
            "false and a note when there was nothing to withdraw. An alert that was "
            "refused: error, the refusal as google.rpc.Status (Connect's error JSON) "
            "with its ErrorInfo reason beside the code."
        ),
        "properties": {
            "fingerprint": {"type": "string"},
            "status": {"type": "string", "enum": ["firing", "resolved", ""]},
            "notificationId": {"type": "string"},
            "idempotentReplay": {"type": "boolean"},
            "state": {"$ref": "#/components/schemas/uns.v1.NotificationState"},
            "ackState": {"$ref": "#/components/schemas/uns.v1.AckState"},
            "withdrawn": {"type": "boolean"},
            "note": {"type": "string"},
            "error": {
                "allOf": [_REFUSAL],
                "properties": {"reason": {"type": "string"}},
                "required": ["reason"],
            },
        },
        "required": ["fingerprint", "status"],
        "additionalProperties": False,
    },
}

_EXAMPLE = {
    "version": "4",
    "groupKey": '{}:{alertname="DiskFull"}',
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "uns",
    "groupLabels": {"alertname": "DiskFull"},
    "commonLabels": {"alertname": "DiskFull", "uns_type": "demo.alert"},
    "commonAnnotations": {},
    "externalURL": "http://alertmanager.example.org:9093",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "DiskFull", "instance": "db-1", "uns_type": "demo.alert"},
            "annotations": {"summary": "Disk almost full", "description": "92% used on db-1"},
            "startsAt": "2026-12-07T05:08:45.828Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.example.org:9090/graph",
            "fingerprint": "1a30ba71cca2921f",
        }
    ],
}

PATHS: dict[str, Any] = {
    "/integrations/alertmanager": {
        "post": {
            "operationId": "Integrations_Alertmanager",
            "tags": ["integrations"],
            "summary": "Alertmanager and Grafana alerts in",
            "description": (
                "Alertmanager's webhook_configs receiver (Grafana: a webhook contact "
                "point), authenticated with a producer's key (Authorization: Bearer, as "
                "http_config.authorization sends it). The firing alerts are sent in one "
                "BatchSendNotifications (budgets, tenancy, policies and dedup as there); "
                "a resolved alert withdraws its notification with the reason 'resolved "
                "at source'. 200 with one result per alert: one bad alert refuses "
                "nothing else. A body that is not JSON or not a webhook payload is 400 "
                "(INVALID_REQUEST naming the field); a missing key 401, a key that is "
                "not a producer's 403, a spent budget 429, as for the gRPC calls."
            ),
            "parameters": [
                {
                    "name": "type",
                    "in": "query",
                    "description": (
                        "The notification type of every alert; without it, each alert's "
                        "uns_type label."
                    ),
                    "schema": {"type": "string"},
                }
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/alertmanager.Webhook"},
                        "examples": {"firing": {"value": _EXAMPLE}},
                    }
                },
            },
            "responses": {
                "200": {
                    "description": "One result per alert",
                    "content": {
                        "application/json": {
                            "schema": {"$ref": "#/components/schemas/alertmanager.Results"}
                        }
                    },
                },
                "default": {
                    "description": "A refusal of the whole payload (google.rpc.Status)",
                    "content": {"application/json": {"schema": _REFUSAL}},
                },
            },
        }
    }
}

SCHEMAS["heartbeats.Beat"] = {
    "type": "object",
    "description": "Nothing: a beat needs no body, and one sent is ignored.",
}

PATHS["/heartbeats/{heartbeat_id}"] = {
    "post": {
        "operationId": "Heartbeats_Beat",
        "tags": ["integrations"],
        "summary": "A heartbeat's beat, for curl from cron",
        "description": (
            "HeartbeatService.Beat for a caller that has only curl: the key as "
            "Authorization: Bearer (a producer's or the operator's), no body needed. The "
            "heartbeat's deadline moves to now + interval + grace; a page it raised is "
            "withdrawn ('heartbeat resumed'). 200 with the BeatResponse; a missing key "
            "401, a key that may not beat 403, an unknown heartbeat 404."
        ),
        "parameters": [
            {
                "name": "heartbeat_id",
                "in": "path",
                "required": True,
                "description": "The heartbeat_id, as put by the operator.",
                "schema": {"type": "string", "minLength": 1, "maxLength": 64},
            }
        ],
        "requestBody": {
            "required": False,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/heartbeats.Beat"}}
            },
        },
        "responses": {
            "200": {
                "description": "The heartbeat after the beat",
                "content": {
                    "application/json": {
                        "schema": {"$ref": "#/components/schemas/uns.v1.BeatResponse"}
                    }
                },
            },
            "default": {
                "description": "A refusal (google.rpc.Status)",
                "content": {"application/json": {"schema": _REFUSAL}},
            },
        },
    }
}

TAG = {
    "name": "integrations",
    "description": "Webhooks other systems post in their own formats.",
}

"""Every validation rule of SendNotificationRequest / AcknowledgeRequest, table-driven."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from uns_server.domain.enums import AutonomyMode, Intent
from uns_server.domain.errors import FieldViolation, InvalidRequest, ReservedMetadataKey
from uns_server.domain.requests import AutonomyContext, SendRequest
from uns_server.domain.validation import (
    validate_ack_metadata,
    validate_notification_id,
    validate_send,
)


def valid(**changes: Any) -> SendRequest:
    req = SendRequest(
        notification_type="trading.circuit_breaker",
        intent=Intent.SAFETY,
        title="Circuit Breaker Tripped",
        message="Order velocity exceeded 500 orders/min.",
        source="order_router",
        idempotency_key="cb-trip-01",
        dedup_key="circuit_breaker:order_router",
        correlation_id="trace-98123",
        autonomy_context=AutonomyContext(AutonomyMode.LIVE, "agent-7"),
        metadata={"orders_per_min": 542, "limit": 500},
    )
    return replace(req, **changes)


def nested(depth: int) -> dict[str, Any]:
    """A metadata object with ``depth`` levels of objects (the top level included)."""
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def fields_of(exc: pytest.ExceptionInfo[InvalidRequest]) -> list[str]:
    return [v.field for v in exc.value.violations]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"notification_type": "a"},
        {"notification_type": "A-z_0.9:x"},
        {"notification_type": "t" * 255},
        {"title": "t" * 255},
        {"message": "m" * 16384},
        {"source": "s" * 255},
        {"idempotency_key": "", "dedup_key": "", "correlation_id": ""},
        {"idempotency_key": "k" * 255, "dedup_key": "d" * 255, "correlation_id": "c" * 255},
        {"autonomy_context": None},
        {"autonomy_context": AutonomyContext(None, "")},
        {"autonomy_context": AutonomyContext(AutonomyMode.MANUAL, "a" * 255)},
        {"metadata": {}},
        {"metadata": nested(8)},
        {"metadata": {"list": [[[[[[[1]]]]]]]}},  # 8 containers: object + 7 lists
        {"metadata": {"s": "x" * 16000}},
        {"metadata": {"n": None, "b": True, "f": 1.5, "i": -3, "l": [1, "a", None]}},
        {"title": " padded ", "message": "\tleading tab"},  # validated as given
        {"title": "ü" * 255},  # characters, not bytes
        {"metadata": {"slack": "#ops", "email": "x@y"}},  # similar, not reserved
        {"metadata": {"nested": {"slack_channel": "#ops"}}},  # only top level is reserved
    ],
)
def test_valid_requests_pass(changes: dict[str, Any]) -> None:
    validate_send(valid(**changes))


@pytest.mark.parametrize(
    ("changes", "field", "description"),
    [
        ({"notification_type": ""}, "notification_type", "is required"),
        ({"notification_type": "   "}, "notification_type", "is required"),
        ({"notification_type": "t" * 256}, "notification_type", "at most 255"),
        ({"notification_type": "has space"}, "notification_type", "only letters"),
        ({"notification_type": "a/b"}, "notification_type", "only letters"),
        ({"notification_type": "ü"}, "notification_type", "only letters"),
        ({"notification_type": "a\x00"}, "notification_type", "only letters"),
        ({"intent": None}, "intent", "is required"),
        ({"title": ""}, "title", "is required"),
        ({"title": " \t\n"}, "title", "is required"),
        ({"title": "t" * 256}, "title", "at most 255"),
        ({"title": "a\x00b"}, "title", "NUL"),
        ({"message": ""}, "message", "is required"),
        ({"message": "   "}, "message", "is required"),
        ({"message": "m" * 16385}, "message", "at most 16384"),
        ({"message": "\x00"}, "message", "NUL"),
        ({"source": ""}, "source", "is required"),
        ({"source": "  "}, "source", "is required"),
        ({"source": "s" * 256}, "source", "at most 255"),
        ({"source": "s\x00"}, "source", "NUL"),
        ({"idempotency_key": "k" * 256}, "idempotency_key", "at most 255"),
        ({"idempotency_key": "\x00"}, "idempotency_key", "NUL"),
        ({"dedup_key": "d" * 256}, "dedup_key", "at most 255"),
        ({"dedup_key": "d\x00"}, "dedup_key", "NUL"),
        ({"correlation_id": "c" * 256}, "correlation_id", "at most 255"),
        ({"correlation_id": "\x00"}, "correlation_id", "NUL"),
        (
            {"autonomy_context": AutonomyContext(AutonomyMode.LIVE, "a" * 256)},
            "autonomy_context.agent_id",
            "at most 255",
        ),
        (
            {"autonomy_context": AutonomyContext(None, "a\x00")},
            "autonomy_context.agent_id",
            "NUL",
        ),
        ({"metadata": nested(9)}, "metadata", "at most 8 levels"),
        ({"metadata": {"l": [[[[[[[[1]]]]]]]]}}, "metadata", "at most 8 levels"),
        ({"metadata": {"s": "x" * 16384}}, "metadata", "at most 16384 bytes"),
        ({"metadata": {"s": "€" * 5500}}, "metadata", "at most 16384 bytes"),  # 3 bytes each
        ({"metadata": {"a\x00": 1}}, "metadata", "NUL"),
        ({"metadata": {"a": ["ok", "b\x00"]}}, "metadata", "NUL"),
        ({"metadata": {"x": float("nan")}}, "metadata", "finite"),
        ({"metadata": {"x": float("inf")}}, "metadata", "finite"),
        ({"metadata": {"x": 10**400}}, "metadata", "finite"),
        ({"metadata": {"x": object()}}, "metadata", "JSON-like"),
        ({"metadata": {"x": {1: "a"}}}, "metadata", "keys must be strings"),
    ],
)
def test_each_rule_reports_its_field(changes: dict[str, Any], field: str, description: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        validate_send(valid(**changes))
    assert exc.value.reason == "INVALID_REQUEST"
    assert len(exc.value.violations) == 1, exc.value.violations
    violation = exc.value.violations[0]
    assert violation.field == field
    assert description in violation.description
    assert exc.value.metadata == {"fields": field}


def test_metadata_size_limit_is_exact() -> None:
    # {"s":"..."} is 8 bytes of framing around the string.
    validate_send(valid(metadata={"s": "x" * (16384 - 8)}))
    with pytest.raises(InvalidRequest) as exc:
        validate_send(valid(metadata={"s": "x" * (16384 - 7)}))
    assert fields_of(exc) == ["metadata"]
    assert "(is 16385)" in exc.value.violations[0].description


def test_all_violations_are_reported_together_in_field_order() -> None:
    req = valid(
        notification_type="bad type",
        intent=None,
        title="",
        message="m" * 16385,
        source=" ",
        idempotency_key="k" * 256,
        dedup_key="d" * 256,
        correlation_id="c" * 256,
        autonomy_context=AutonomyContext(None, "a" * 256),
        # Reserved key too: ordinary violations win, reserved keys are checked afterwards.
        metadata={"slack_channel": "#x", "deep": nested(8)},
    )
    with pytest.raises(InvalidRequest) as exc:
        validate_send(req)
    assert fields_of(exc) == [
        "notification_type",
        "intent",
        "title",
        "message",
        "source",
        "idempotency_key",
        "dedup_key",
        "correlation_id",
        "autonomy_context.agent_id",
        "metadata",
    ]
    assert exc.value.metadata["fields"].split(",") == fields_of(exc)


def test_one_field_may_have_several_problems() -> None:
    with pytest.raises(InvalidRequest) as exc:
        validate_send(valid(title="\x00" * 256))
    assert exc.value.violations == (
        FieldViolation("title", "must be at most 255 characters"),
        FieldViolation("title", "must not contain NUL characters"),
    )
    assert exc.value.metadata == {"fields": "title"}


@pytest.mark.parametrize(
    ("metadata", "keys"),
    [
        ({"slack_channel": "#ops"}, ["slack_channel"]),
        ({"email_to": "a@b"}, ["email_to"]),
        ({"pagerduty_severity": "critical"}, ["pagerduty_severity"]),
        ({"websocket_user_id": "u1"}, ["websocket_user_id"]),
        ({"websocket_user_id": None, "email_to": "a", "ok": 1}, ["email_to", "websocket_user_id"]),
    ],
)
def test_reserved_metadata_keys(metadata: dict[str, Any], keys: list[str]) -> None:
    with pytest.raises(ReservedMetadataKey) as exc:
        validate_send(valid(metadata=metadata))
    assert exc.value.reason == "RESERVED_METADATA_KEY"
    assert exc.value.metadata == {"keys": ",".join(keys)}
    assert [v.field for v in exc.value.violations] == [f"metadata.{k}" for k in keys]
    for key in keys:
        assert key in exc.value.message


def test_ack_metadata_limits() -> None:
    validate_ack_metadata({})
    validate_ack_metadata(nested(8))
    validate_ack_metadata({"slack_channel": "fine here"})  # reserved keys are a Send rule
    for bad, description in [
        (nested(9), "at most 8 levels"),
        ({"s": "x" * 16384}, "at most 16384 bytes"),
        ({"s": "\x00"}, "NUL"),
    ]:
        with pytest.raises(InvalidRequest) as exc:
            validate_ack_metadata(bad)
        assert fields_of(exc) == ["metadata"]
        assert description in exc.value.violations[0].description


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d", "0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d"),
        ("0B5E0B8E-6F57-4C3B-9D61-0A4F1F3C2E7D", "0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d"),
        ("00000000-0000-0000-0000-000000000000", "00000000-0000-0000-0000-000000000000"),
    ],
)
def test_notification_id_is_normalized(value: str, expected: str) -> None:
    assert validate_notification_id(value) == expected


@pytest.mark.parametrize(
    ("value", "description"),
    [
        ("", "is required"),
        ("not-a-uuid", "must be a UUID"),
        ("0b5e0b8e6f574c3b9d610a4f1f3c2e7d", "must be a UUID"),  # unhyphenated
        ("{0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d}", "must be a UUID"),
        ("urn:uuid:0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d", "must be a UUID"),
        (" 0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d", "must be a UUID"),
        ("0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d\n", "must be a UUID"),
        ("0b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7g", "must be a UUID"),
        ("\u0660b5e0b8e-6f57-4c3b-9d61-0a4f1f3c2e7d", "must be a UUID"),  # Arabic-Indic digit
    ],
)
def test_notification_id_rejects(value: str, description: str) -> None:
    with pytest.raises(InvalidRequest) as exc:
        validate_notification_id(value, field="request.notification_id")
    assert exc.value.violations == (
        FieldViolation("request.notification_id", exc.value.violations[0].description),
    )
    assert description in exc.value.violations[0].description

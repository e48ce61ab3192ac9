"""Request validation: the limits documented on ``SendNotificationRequest`` and friends.

``validate_send`` reports every ordinary field problem at once (one ``InvalidRequest``
carrying a ``FieldViolation`` per problem) and only then looks for reserved metadata keys,
so a producer fixes a request in one round trip. Values are validated as given: nothing is
stripped, but a whitespace-only required field counts as missing. Lengths are counted in
Unicode code points ("characters"); metadata size in bytes of its compact UTF-8 JSON.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from uns_server.domain.digests import canonical_json, struct_number
from uns_server.domain.errors import FieldViolation, InvalidRequest, ReservedMetadataKey
from uns_server.domain.fields import NUL_PROBLEM, text_problems
from uns_server.domain.requests import SendRequest
from uns_server.domain.schedule import schedule_violations

NOTIFICATION_TYPE_MAX_CHARS = 255
TITLE_MAX_CHARS = 255
MESSAGE_MAX_CHARS = 16384
SOURCE_MAX_CHARS = 255
KEY_MAX_CHARS = 255
"""idempotency_key, dedup_key, correlation_id and autonomy_context.agent_id."""
METADATA_MAX_BYTES = 16 * 1024
METADATA_MAX_DEPTH = 8
"""The metadata object itself is level 1; each nested object or list adds a level."""

RESERVED_METADATA_KEYS = frozenset(
    {"slack_channel", "email_to", "pagerduty_severity", "websocket_user_id"}
)

_NOTIFICATION_TYPE = re.compile(r"[A-Za-z0-9._:-]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def validate_send(req: SendRequest, now: datetime | None = None) -> None:
    """Raise ``InvalidRequest`` (all violations) or ``ReservedMetadataKey``; else return.
    ``schedule_time`` is checked against ``now`` when given."""
    violations: list[FieldViolation] = []

    def check(field: str, problems: list[str]) -> None:
        if problems:  # nearly always empty: no generator for nothing (issue 24)
            violations.extend(FieldViolation(field, p) for p in problems)

    check("notification_type", _notification_type(req.notification_type))
    if req.intent is None:
        check("intent", ["is required"])
    check("title", text_problems(req.title, TITLE_MAX_CHARS, required=True))
    check("message", text_problems(req.message, MESSAGE_MAX_CHARS, required=True))
    check("source", text_problems(req.source, SOURCE_MAX_CHARS, required=True))
    check("idempotency_key", text_problems(req.idempotency_key, KEY_MAX_CHARS))
    check("dedup_key", text_problems(req.dedup_key, KEY_MAX_CHARS))
    check("correlation_id", text_problems(req.correlation_id, KEY_MAX_CHARS))
    if req.autonomy_context is not None:
        check(
            "autonomy_context.agent_id", text_problems(req.autonomy_context.agent_id, KEY_MAX_CHARS)
        )
    check("metadata", _metadata(req.metadata))
    if now is not None:
        violations += schedule_violations(req.schedule_time, now)
    _raise_invalid(violations)

    reserved = sorted(RESERVED_METADATA_KEYS.intersection(req.metadata))
    if reserved:
        keys = ", ".join(reserved)
        raise ReservedMetadataKey(
            f"Metadata holds reserved routing keys ({keys}); routing lives in policy and "
            "server configuration.",
            metadata={"keys": ",".join(reserved)},
            violations=[FieldViolation(f"metadata.{k}", "is a reserved key") for k in reserved],
        )


def validate_ack_metadata(metadata: Mapping[str, Any]) -> None:
    """Acknowledge metadata: the same size, depth and content limits as send metadata."""
    _raise_invalid([FieldViolation("metadata", p) for p in _metadata(metadata)])


def validate_notification_id(value: str, field: str = "notification_id") -> str:
    """Return the canonical (lowercase, hyphenated) UUID string, or raise ``InvalidRequest``."""
    if value == "":
        problem = "is required"
    elif _UUID.fullmatch(value) is None:
        problem = "must be a UUID (8-4-4-4-12 hexadecimal digits)"
    else:
        return str(uuid.UUID(value))
    raise InvalidRequest(metadata={"fields": field}, violations=[FieldViolation(field, problem)])


def _raise_invalid(violations: list[FieldViolation]) -> None:
    if violations:
        fields = ",".join(dict.fromkeys(v.field for v in violations))
        raise InvalidRequest(metadata={"fields": fields}, violations=violations)


def _notification_type(value: str) -> list[str]:
    if not value.strip():
        return ["is required"]
    problems = []
    if len(value) > NOTIFICATION_TYPE_MAX_CHARS:
        problems.append(f"must be at most {NOTIFICATION_TYPE_MAX_CHARS} characters")
    if _NOTIFICATION_TYPE.fullmatch(value) is None:
        problems.append("may contain only letters, digits and . _ : -")
    return problems


def _metadata(metadata: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    _walk(metadata, 1, problems)
    if problems:
        # Malformed or too deep: the size is meaningless (and may not be computable).
        return sorted(set(problems))
    size = len(canonical_json(metadata).encode("utf-8"))
    if size > METADATA_MAX_BYTES:
        return [f"must be at most {METADATA_MAX_BYTES} bytes serialized (is {size})"]
    return []


def _walk(value: object, depth: int, problems: list[str]) -> None:
    """Collect content problems of a JSON-like value; ``depth`` counts containers."""
    if type(value) is str:  # most values: skip the ABC check (``Mapping``) below
        if "\x00" in value:
            problems.append(NUL_PROBLEM)
        return
    if isinstance(value, Mapping | list | tuple):
        if depth > METADATA_MAX_DEPTH:
            problems.append(f"must be at most {METADATA_MAX_DEPTH} levels deep")
            return  # Do not descend into arbitrarily deep input.
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str):
                    problems.append("keys must be strings")
                elif "\x00" in key:
                    problems.append(NUL_PROBLEM)
                _walk(item, depth + 1, problems)
        else:
            for item in value:
                _walk(item, depth + 1, problems)
    elif isinstance(value, str):
        if "\x00" in value:
            problems.append(NUL_PROBLEM)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            struct_number(value)
        except ValueError:
            problems.append("numbers must be finite doubles")
    elif value is not None and not isinstance(value, bool):
        problems.append(f"values must be JSON-like, not {type(value).__name__}")

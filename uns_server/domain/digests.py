"""Digests: idempotency key, dedup key, request fingerprint (SPEC §2).

Everything hashed here goes through :func:`canonical_json` first, so a digest depends only
on *values*: mapping key order never matters, and numbers compare the way a
``google.protobuf.Struct`` carries them (as IEEE doubles, so ``1``, ``1.0`` and
``2**53 + 1`` vs ``2**53`` fold together exactly as they would on the wire).

The digests are stored (``uns_notifications.key``, ``fingerprint``, ``dedup_key``), so the
encoding below is part of the storage format: change it only with a migration.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from uns_server.domain.requests import AutonomyContext, SendRequest


def canonical_json(value: object) -> str:
    """Compact, key-sorted JSON with Struct number semantics; the input to every digest.

    Mappings (string keys only) and lists/tuples nest; enums encode by name; floats that
    are integral become ints; non-finite numbers and other types raise ``ValueError``.
    """
    return _ENCODER.encode(_canonical(value))


# What ``json.dumps(..., sort_keys=True, ...)`` would build on every call (an encoder
# holds no state between calls): three digests per accept.
_ENCODER = json.JSONEncoder(
    sort_keys=True,
    separators=(",", ":"),
    ensure_ascii=False,
    allow_nan=False,
)


def sha256_hex(value: object) -> str:
    """SHA-256 hex digest of ``canonical_json(value)`` encoded as UTF-8."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def idempotency_digest(principal: str, source: str, idempotency_key: str) -> str:
    """The idempotency scope: SHA-256 of ``[principal, source, idempotency_key]``."""
    return sha256_hex([principal, source, idempotency_key])


def dedup_digest(
    principal: str,
    source: str,
    dedup_key: str,
    effective_hash: str,
    scheduled_for: datetime | None = None,
) -> str:
    """The coalescing scope: SHA-256 of ``[principal, source, dedup_key, effective_hash]``,
    and for a send scheduled in the future its ``schedule_time`` as well: a send that is
    due now never waits behind a scheduled leader (it would be delivered only at the
    leader's time), while repeats of one scheduled send still coalesce."""
    parts = [principal, source, dedup_key, effective_hash]
    if scheduled_for is not None:
        parts.append(scheduled_for.astimezone(UTC).isoformat())
    return sha256_hex(parts)


def fingerprint(req: SendRequest) -> str:
    """SHA-256 of every payload field of a send request.

    An idempotent retry must carry the same fingerprint. ``wait_for_first_attempt`` is a
    call option, not payload, and is not part of :class:`SendRequest`. An autonomy context
    with neither mode nor agent id is the same payload as none at all (clients differ in
    whether they send an empty message).
    """
    payload: dict[str, Any] = {
        "notification_type": req.notification_type,
        "intent": req.intent,
        "title": req.title,
        "message": req.message,
        "source": req.source,
        "idempotency_key": req.idempotency_key,
        "dedup_key": req.dedup_key,
        "correlation_id": req.correlation_id,
        "autonomy_context": _autonomy(req.autonomy_context),
        "metadata": req.metadata,
        "delivery_mode": req.delivery_mode,
        "require_ack": req.require_ack,
        "priority": req.priority,
    }
    if req.schedule_time is not None:
        # Only when set, so fingerprints stored before scheduled sends still match.
        payload["schedule_time"] = req.schedule_time.astimezone(UTC).isoformat()
    return sha256_hex(payload)


def _autonomy(ctx: AutonomyContext | None) -> dict[str, Any] | None:
    if ctx is None or (ctx.autonomy_mode is None and ctx.agent_id == ""):
        return None
    return {"autonomy_mode": ctx.autonomy_mode, "agent_id": ctx.agent_id}


def struct_number(value: int | float) -> int | float:
    """A number as a Struct carries it: a double, shown as an int when integral.

    Raises ``ValueError`` for NaN, infinities and ints beyond the double range.
    """
    try:
        as_double = float(value)
    except OverflowError:
        raise ValueError(f"number out of range: {value}") from None
    if not math.isfinite(as_double):
        raise ValueError(f"non-finite number: {value}")
    if as_double.is_integer():
        return int(as_double)
    return as_double


def _canonical(value: object) -> Any:
    # Exact str, None, dict and list first: nearly every value is one, and the ABC
    # check below (``Mapping``) costs more than the rest of the walk (issue 24).
    cls = type(value)
    if cls is str or value is None:
        return value
    if cls is dict:
        return _mapping(value)  # type: ignore[arg-type]
    if cls is list:
        return [_canonical(item) for item in value]  # type: ignore[attr-defined]
    # bool before int: bool is an int subclass but a distinct JSON type.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return struct_number(value)
    if isinstance(value, Mapping):
        return _mapping(value)
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    raise ValueError(f"not JSON-like: {type(value).__name__}")


def _mapping(value: Mapping[Any, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(f"mapping key is not a string: {key!r}")
        out[key] = _canonical(item)
    return out

"""The notification document: the request as accepted, typed.

The ``notification`` column holds one JSON object per notification, built once by
intake (``services.intake_record``), written by the store (``to_json``) and never
changed: the request's fields, the frozen effective policy (``effective``) and the
accepting span's trace context. The store
parses it once per row read (``store.records``) into :class:`NotificationDocument`;
nothing above the store reads the JSON.

Its shape on disk is fixed (rows written by every earlier version still read): the
keys read with a default here were absent or null in some of them (``schedule_time``
and ``trace_context`` are written only when set; the policy's time blocks only when
the policy has them), so :meth:`NotificationDocument.from_json` gives them the value
the wire shows for "unset". :meth:`NotificationDocument.to_json` writes exactly the
shape intake always wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from uns_server.domain.enums import AutonomyMode, Intent
from uns_server.domain.policy import EffectivePolicy
from uns_server.domain.requests import AutonomyContext, SendRequest

__all__ = ["NotificationDocument", "effective_policy"]

_INTENT: dict[str, Intent] = {i.value: i for i in Intent}
_MODE: dict[str, AutonomyMode] = {m.value: m for m in AutonomyMode}


@dataclass(frozen=True, slots=True)
class NotificationDocument:
    """The ``notification`` column of one ``uns_notifications`` row."""

    notification_type: str
    intent: Intent | None
    title: str
    message: str
    source: str
    idempotency_key: str
    """The producer's key ("" when the request had none)."""
    dedup_key: str
    """The request's dedup key ("" when none)."""
    correlation_id: str
    autonomy_context: AutonomyContext | None
    metadata: Mapping[str, Any]
    """The request's metadata, JSON-like (read-only by convention)."""
    effective: EffectivePolicy
    """The policy frozen for this notification when it was accepted."""
    schedule_time: datetime | None = None
    """When the producer asked for the first attempt (aware UTC); None: at once."""
    trace_context: Mapping[str, str] | None = None
    """The accepting RPC's span (W3C carrier); dispatch attempts link to it."""

    @classmethod
    def accepted(
        cls,
        req: SendRequest,
        effective: EffectivePolicy,
        trace_context: Mapping[str, str] | None,
    ) -> NotificationDocument:
        """The document of a request intake admits."""
        return cls(
            notification_type=req.notification_type,
            intent=req.intent,
            title=req.title,
            message=req.message,
            source=req.source,
            idempotency_key=req.idempotency_key,
            dedup_key=req.dedup_key,
            correlation_id=req.correlation_id,
            autonomy_context=req.autonomy_context,
            metadata=req.metadata,
            effective=effective,
            schedule_time=req.schedule_time,
            trace_context=dict(trace_context) if trace_context else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The stored JSON object (the shape every version wrote)."""
        ctx = self.autonomy_context
        out: dict[str, Any] = {
            "notification_type": self.notification_type,
            "intent": self.intent.value if self.intent else None,
            "title": self.title,
            "message": self.message,
            "source": self.source,
            "idempotency_key": self.idempotency_key,
            "dedup_key": self.dedup_key,
            "correlation_id": self.correlation_id,
            "autonomy_context": (
                {
                    "autonomy_mode": ctx.autonomy_mode.value if ctx.autonomy_mode else None,
                    "agent_id": ctx.agent_id,
                }
                if ctx
                else None
            ),
            "metadata": dict(self.metadata),
            "effective": self.effective.to_json(),
        }
        if self.schedule_time is not None:
            out["schedule_time"] = self.schedule_time.astimezone(UTC).isoformat()
        if self.trace_context:
            # Not part of the idempotency fingerprint, which is the request's.
            out["trace_context"] = dict(self.trace_context)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NotificationDocument:
        """Inverse of :meth:`to_json`, also for the documents earlier versions wrote."""
        # Positional, in field order: it runs once per row read, on the hot path.
        get, intent, ctx, scheduled = (
            data.get,
            data.get("intent"),
            data.get("autonomy_context"),
            None,
        )
        if get("schedule_time"):
            scheduled = datetime.fromisoformat(data["schedule_time"]).astimezone(UTC)
        return cls(
            get("notification_type") or "",
            _INTENT[intent] if intent else None,
            data["title"],
            data["message"],
            get("source") or "",
            get("idempotency_key") or "",
            get("dedup_key") or "",
            get("correlation_id") or "",
            (
                AutonomyContext(
                    _MODE[ctx["autonomy_mode"]] if ctx.get("autonomy_mode") else None,
                    ctx.get("agent_id") or "",
                )
                if ctx
                else None
            ),
            get("metadata") or {},
            effective_policy(data["effective"]),
            scheduled,
            get("trace_context") or None,
        )


# Every row read parses its effective policy, and a claim or a listing reads many rows
# that share few policies (one per ACTIVE revision, or the server defaults): parsing
# each is most of a document's cost. Keyed by the frozen hash and checked against the
# stored object itself, so an entry is only reused for equal JSON; bounded, cleared
# when full.
_EFFECTIVE_MAX = 1024
_effective: dict[str, tuple[Mapping[str, Any], EffectivePolicy]] = {}


def effective_policy(data: Mapping[str, Any]) -> EffectivePolicy:
    """The stored ``effective`` object as the policy it froze."""
    key = data.get("effective_hash")
    hit = _effective.get(key) if isinstance(key, str) else None
    if hit is not None and hit[0] == data:
        return hit[1]
    parsed = EffectivePolicy.from_json(data)
    if isinstance(key, str):
        if len(_effective) >= _EFFECTIVE_MAX:
            _effective.clear()
        _effective[key] = (data, parsed)
    return parsed

"""Notification documents for tests that write ``uns_notifications`` rows directly."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uns_server.domain.documents import NotificationDocument
from uns_server.domain.policy import EffectivePolicy, PolicySpec, ServerDefaults


def effective(channels: Sequence[str] = ("webhook",), **spec: Any) -> EffectivePolicy:
    """The server defaults' effective policy on ``channels`` (``spec`` overrides)."""
    d = ServerDefaults(channels=("log",))
    values: dict[str, Any] = {
        "channels": tuple(channels),
        "delivery_mode": d.delivery_mode,
        "require_ack": d.require_ack,
        "ack_timeout_minutes": d.ack_timeout_minutes,
        "priority": d.priority,
        "dedup_window_seconds": d.dedup_window_seconds,
        "max_attempts": d.max_attempts,
    }
    return EffectivePolicy.of(
        PolicySpec(**(values | spec)), policy_id=None, policy_revision=0, policy_hash=None
    )


def accepted(channels: Sequence[str] = ("webhook",), **fields: Any) -> NotificationDocument:
    """An accepted notification's document on ``channels`` (``fields`` override)."""
    values: dict[str, Any] = {
        "notification_type": "tests",
        "intent": None,
        "title": "t",
        "message": "m",
        "source": "tests",
        "idempotency_key": "",
        "dedup_key": "",
        "correlation_id": "",
        "autonomy_context": None,
        "metadata": {},
        "effective": effective(channels),
    }
    return NotificationDocument(**(values | fields))


def document(channels: Sequence[str] = ("webhook",), **fields: Any) -> dict[str, Any]:
    """The stored JSON of :func:`accepted`."""
    return accepted(channels, **fields).to_json()

"""Producer requests as domain values, built from protobuf at the transport edge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from uns_server.domain.enums import AutonomyMode, DeliveryMode, Intent, Priority


@dataclass(frozen=True)
class AutonomyContext:
    autonomy_mode: AutonomyMode | None
    agent_id: str


@dataclass(frozen=True)
class SendRequest:
    """A SendNotificationRequest. ``None`` means the producer left the field unset."""

    notification_type: str
    intent: Intent | None
    title: str
    message: str
    source: str
    idempotency_key: str = ""
    dedup_key: str = ""
    correlation_id: str = ""
    autonomy_context: AutonomyContext | None = None
    # JSON-like mapping (google.protobuf.Struct converted to plain Python).
    metadata: Mapping[str, Any] = field(default_factory=dict)
    delivery_mode: DeliveryMode | None = None
    require_ack: bool | None = None
    priority: Priority | None = None
    # When to make the first attempt (aware UTC); None: now.
    schedule_time: datetime | None = None

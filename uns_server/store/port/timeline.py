"""The append-only history ports: the event timeline and the audit records."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from uns_server.domain.enums import AckStatus
from uns_server.domain.records import AckAuditRecord, DeliveryAuditRecord, Event
from uns_server.store.port.values import DeliveryAudit, NewEvent


class EventReads(Protocol):
    async def read_after(
        self,
        after_sequence: int,
        *,
        limit: int,
        principals: Collection[str] | None = None,
        notification_ids: Sequence[str] = (),
        kinds: Sequence[str] = (),
        notification_type: str = "",
    ) -> Sequence[Event]:
        """Matching events with sequence > ``after_sequence``, oldest first."""
        ...

    async def high_water(self) -> int:
        """The greatest committed sequence (0 for an empty timeline)."""
        ...


class Events(EventReads, Protocol):
    """The append-only timeline."""

    async def append(self, items: Iterable[NewEvent], now: datetime) -> None:
        """Append in commit order: the last write of the transaction (signal topics
        before it: their NOTIFY then rides in its statement)."""
        ...


class AuditReads(Protocol):
    async def delivery_records(
        self, notification_id: str, *, offset: int, limit: int
    ) -> Sequence[DeliveryAuditRecord]:
        """A page of one notification's delivery records in write order."""
        ...

    async def ack_records(
        self, notification_id: str, *, offset: int, limit: int
    ) -> Sequence[AckAuditRecord]:
        """A page of one notification's ack records in write order."""
        ...


class Audit(AuditReads, Protocol):
    """Append-only audit records: written, never updated."""

    async def record_ack(
        self,
        notification_id: str,
        *,
        old_status: AckStatus | None,
        new_status: AckStatus,
        actor: str,
        metadata: Mapping[str, Any] | None,
        now: datetime,
        via: str | None = None,
    ) -> None:
        """One ack record: who moved the ack from ``old_status`` to ``new_status``."""
        ...

    async def record_deliveries(self, settled: Sequence[DeliveryAudit], now: datetime) -> None:
        """One delivery record per settled attempt. Nothing in the transaction reads
        them back: on PostgreSQL they ride in its events append."""
        ...

"""What a WatchEvents stream carries: one shared item per committed event, a stream's
filter over items, and the heartbeat that gives a stream its position.

The hub makes one ``WatchItem`` per event record and hands the same object to every
stream it matches, so an event is measured and (by the API layer) encoded once,
however many streams it reaches.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from uns_server.domain.records import Event

# What an event costs besides its payload (record, item, protobuf message), in bytes.
EVENT_OVERHEAD_BYTES = 512


class WatchItem:
    """One event as streams see it. The hub makes one per committed event and hands
    the same item to every matching subscription, so the API layer can encode the
    event once (``encoded``; ``redacted`` for non-operators, SPEC §3 personal data) and
    share the result with every stream it reaches. The fields filters match on are
    copied out of the record once, for the fan-out loop."""

    __slots__ = (
        "encoded",
        "event",
        "kind",
        "notification_id",
        "notification_type",
        "principal",
        "redacted",
        "sequence",
        "size",
    )

    def __init__(self, event: Event) -> None:
        self.event = event
        self.sequence = event.sequence
        self.principal = event.principal
        self.notification_id = event.notification_id
        self.kind: str = event.kind
        self.notification_type = event.notification_type
        self.encoded: object | None = None  # the API layer's cache; never mutated once set
        # The same without people's addresses, for streams other than operators'
        # (built by the first such stream it reaches; ``encoded`` if there are none).
        self.redacted: object | None = None
        self.size = EVENT_OVERHEAD_BYTES + payload_bytes(event.payload)


def payload_bytes(payload: object) -> int:
    """Roughly the bytes of a stored event payload (its JSON text; a decoded document
    is measured by its compact JSON, which the hub pays once per event)."""
    if isinstance(payload, str | bytes):
        return len(payload)
    return len(orjson.dumps(payload, default=str))


@dataclass(frozen=True)
class WatchFilter:
    principals: frozenset[str] | None  # the caller's tenants; None: every one (operators)
    notification_ids: frozenset[str]
    kinds: frozenset[str]
    notification_type: str

    def matches(self, item: WatchItem) -> bool:
        return (
            (self.principals is None or item.principal in self.principals)
            and (not self.notification_ids or item.notification_id in self.notification_ids)
            and (not self.kinds or item.kind in self.kinds)
            and (not self.notification_type or item.notification_type == self.notification_type)
        )


@dataclass(frozen=True)
class StreamHeartbeat:
    high_water_sequence: int

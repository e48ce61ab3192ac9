"""The append-only audit trail of one notification (seed 000 §2.4), read a page at a
time for ``uns.v1.AuditService``.

A notification has a handful of records (one per settled attempt, one per ack
transition), so a page is an OFFSET/LIMIT slice of the notification's records in write
order (ties broken by id), and the page token carries the notification id and the
offset. Records are never updated or deleted while the notification exists, so the
offset of a record never moves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Protocol, TypeVar

from uns_server.domain import paging
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.records import AckAuditRecord, DeliveryAuditRecord
from uns_server.domain.validation import validate_notification_id
from uns_server.store import audit
from uns_server.store.db import Connection, Database

R = TypeVar("R")


class Reader(Protocol[R]):
    def __call__(
        self, conn: Connection, notification_id: str, *, offset: int, limit: int
    ) -> Awaitable[list[R]]: ...


def _encode_token(notification_id: str, offset: int) -> str:
    return paging.encode_token(notification_id, offset)


def _decode_token(token: str, notification_id: str) -> int:
    try:
        owner, offset = paging.decode_token(token, 2)
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 2**31:
            raise ValueError(offset)
    except ValueError:
        raise InvalidRequest.of_field("page_token", "not a token from this server") from None
    if owner != notification_id:
        raise InvalidRequest.of_field("page_token", "the token belongs to a different notification")
    return offset


class AuditTrail:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def delivery_records(
        self, notification_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[DeliveryAuditRecord], str]:
        """One page of delivery records and the next page's token ("" at the end)."""
        return await self._page(audit.delivery_records, notification_id, page_size, page_token)

    async def ack_records(
        self, notification_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[AckAuditRecord], str]:
        """One page of ack records and the next page's token ("" at the end)."""
        return await self._page(audit.ack_records, notification_id, page_size, page_token)

    async def _page(
        self, read: Reader[R], notification_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[R], str]:
        nid = validate_notification_id(notification_id)
        limit = paging.page_limit(page_size)
        offset = _decode_token(page_token, nid) if page_token else 0
        async with self.db.read() as conn:
            rows = await read(conn, nid, offset=offset, limit=limit + 1)  # one more: a next page?
        end = offset + limit
        return rows[:limit], _encode_token(nid, end) if len(rows) > limit else ""

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
from uns_server.store.port import ReadTransaction, Store

R = TypeVar("R", covariant=True)


class Reader(Protocol[R]):
    """One of the audit port's page reads, of the transaction it is handed."""

    def __call__(
        self, tx: ReadTransaction, notification_id: str, *, offset: int, limit: int
    ) -> Awaitable[Sequence[R]]: ...


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
    def __init__(self, store: Store) -> None:
        self.store = store

    async def delivery_records(
        self, notification_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[DeliveryAuditRecord], str]:
        """One page of delivery records and the next page's token ("" at the end)."""
        return await self._page(
            lambda tx, nid, *, offset, limit: tx.audit.delivery_records(
                nid, offset=offset, limit=limit
            ),
            notification_id,
            page_size,
            page_token,
        )

    async def ack_records(
        self, notification_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[AckAuditRecord], str]:
        """One page of ack records and the next page's token ("" at the end)."""
        return await self._page(
            lambda tx, nid, *, offset, limit: tx.audit.ack_records(nid, offset=offset, limit=limit),
            notification_id,
            page_size,
            page_token,
        )

    async def _page(
        self, read: Reader[R], notification_id: str, page_size: int, page_token: str
    ) -> tuple[Sequence[R], str]:
        nid = validate_notification_id(notification_id)
        limit = paging.page_limit(page_size)
        offset = _decode_token(page_token, nid) if page_token else 0
        async with self.store.read() as tx:
            rows = await read(tx, nid, offset=offset, limit=limit + 1)  # one more: a next page?
        end = offset + limit
        return rows[:limit], _encode_token(nid, end) if len(rows) > limit else ""

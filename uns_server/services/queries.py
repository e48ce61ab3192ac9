"""Reading obligations: GetNotification and ListNotifications (AIP-158 paging,
an AIP-160 subset for filters). A caller reads only the notifications of its tenants
(``Principal.tenants``), and an id it may not see answers NOT_FOUND exactly like an
unknown one. Listing is narrower still: a producer lists its own principal's rows, an
operator everyone's (a responder answers by id; it has no queue to browse)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import orjson

from uns_server.aio import wait_event
from uns_server.domain import filters, paging
from uns_server.domain.enums import AckStatus, Status
from uns_server.domain.errors import InvalidRequest, NotFound
from uns_server.domain.records import Notification
from uns_server.domain.validation import validate_notification_id
from uns_server.services.auth import Principal
from uns_server.store.port import NOTIFICATION_FILTER_FIELDS, TOPIC_EVENTS, Store

# Database column names (the seed's) that a caller may try, and their wire names (AIP-216).
_WIRE_NAME = {"status": "state", "ack_status": "ack_state"}


def parse_filter(text: str) -> list[tuple[str, str | bool]]:
    """``a = x AND b = "y"`` -> [(a, x), (b, y)] with enum and boolean values checked
    (the syntax is ``domain.filters``': linear, capped in length)."""
    conditions: list[tuple[str, str | bool]] = []
    for term in filters.parse(text, NOTIFICATION_FILTER_FIELDS, hints=_WIRE_NAME):
        field, value = term.field, term.value
        checked: str | bool = value
        if field == "state":
            checked = _enum_value(Status, value, "NOTIFICATION_STATE_", field)
        elif field == "ack_state":
            checked = _enum_value(AckStatus, value, "ACK_STATE_", field)
        elif field == "dead_letter":
            if value.lower() not in ("true", "false"):
                raise InvalidRequest.of_field("filter", "dead_letter must be true or false")
            checked = value.lower() == "true"
        conditions.append((field, checked))
    return conditions


def _enum_value(cls: type[Status] | type[AckStatus], value: str, prefix: str, field: str) -> str:
    name = value.upper().removeprefix(prefix)
    try:
        return cls(name).value
    except ValueError:
        raise InvalidRequest.of_field(
            "filter", f"{field}: unknown value {filters.echo(value)}"
        ) from None


# A ListNotifications page stops growing at this size (it always holds one row).
PAGE_BYTES_MAX = 1024 * 1024
# Rows read per query while a page is filled.
LIST_CHUNK_ROWS = 50
ROW_OVERHEAD_BYTES = 1024


class Queries:
    def __init__(self, store: Store) -> None:
        self._store = store
        # Replaced on every commit: a waiter that took the current one before reading
        # the database cannot miss a commit that lands between its read and its wait.
        self._committed = asyncio.Event()
        store.on_commit(TOPIC_EVENTS, self._notify_commit)

    def _notify_commit(self) -> None:
        self._committed.set()
        self._committed = asyncio.Event()

    async def wait_first_attempt(self, notification_id: str, seconds: float) -> Status:
        """The state of a just-accepted notification once its first attempt settled, it
        left PENDING, or ``seconds`` passed (SendNotification ``wait_for_first_attempt``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while True:
            committed = self._committed
            async with self._store.read() as tx:
                row = await tx.notifications.get(notification_id)
            assert row is not None
            settled = row.attempts > 0 and row.lease_token is None
            # Scheduled for later, or held by quiet hours: no attempt to wait for now.
            later = row.attempts == 0 and row.next_attempt > row.created_at
            left = deadline - loop.time()
            if row.status != Status.PENDING or settled or later or left <= 0:
                return row.status
            await wait_event(committed, min(left, 1.0))

    async def get(self, principal: Principal, notification_id: str) -> Notification:
        nid = validate_notification_id(notification_id)
        async with self._store.read() as tx:
            row = await tx.notifications.get(nid)
        if row is None or not visible(principal, row):
            raise NotFound(metadata={"notification_id": nid})
        return row

    async def list(
        self, principal: Principal, filter_text: str, page_size: int, page_token: str
    ) -> tuple[list[Notification], str]:
        limit = paging.page_limit(page_size)
        conditions = parse_filter(filter_text)
        if not principal.sees_everything:
            conditions.append(("principal", principal.name))
        after = None
        if page_token:
            try:
                created_at, last_id, token_filter = decode_page_token(page_token)
            except ValueError:
                raise InvalidRequest.of_field(
                    "page_token", "not a token from this server"
                ) from None
            if token_filter != filter_text:
                raise InvalidRequest.of_field(
                    "page_token", "the token belongs to a different filter"
                )
            after = (created_at, last_id)
        rows, more = await read_page(self._store, conditions, after, limit)
        next_token = ""
        if more:
            last = rows[-1]
            next_token = encode_page_token(last.created_at, last.id, filter_text)
        return rows, next_token


async def read_page(
    store: Store,
    conditions: list[tuple[str, str | bool]],
    after: tuple[datetime, str] | None,
    limit: int,
) -> tuple[list[Notification], bool]:
    """Up to ``limit`` rows after ``after``, and whether more may follow. Read in
    chunks, and cut short once the page holds ``PAGE_BYTES_MAX`` (AIP-158 allows a
    shorter page): a thousand notifications at their size limits are ~30 MB, and
    decoding and encoding them at once held the event loop for seconds."""
    rows: list[Notification] = []
    size = 0
    async with store.read() as tx:
        while True:
            want = min(LIST_CHUNK_ROWS, limit + 1 - len(rows))
            chunk = await tx.notifications.list_page(conditions=conditions, after=after, limit=want)
            for row in chunk:
                if len(rows) == limit:
                    return rows, True  # the extra row: another page exists
                rows.append(row)
                size += row_bytes(row)
                if size >= PAGE_BYTES_MAX:
                    return rows, True
            if len(chunk) < want:
                return rows, False
            after = (chunk[-1].created_at, chunk[-1].id)


def row_bytes(row: Notification) -> int:
    """Roughly what a notification costs to send: its documents (the request with its
    message and metadata, the outcome, the response metadata) as compact JSON."""
    documents = (row.notification.to_json(), row.outcome.to_json(), row.response_metadata)
    return ROW_OVERHEAD_BYTES + sum(
        len(orjson.dumps(doc, default=str)) for doc in documents if doc is not None
    )


def visible(principal: Principal, row: Notification) -> bool:
    """Whether ``row`` is within the caller's tenants (SPEC §3): operators see every
    notification, a producer its own principal's, a responder also those of the
    principals its key responds for."""
    return principal.may_read(row.principal)


def encode_page_token(created_at: datetime, last_id: str, filter_text: str) -> str:
    return paging.encode_token(created_at.isoformat(), last_id, filter_text)


def decode_page_token(token: str) -> tuple[datetime, str, str]:
    """Raises ValueError on a token this server did not make."""
    created_at, last_id, filter_text = paging.decode_token(token, 3)
    if not isinstance(created_at, str):
        raise ValueError("page token time is not a string")
    after = datetime.fromisoformat(created_at)
    if after.tzinfo is None:
        raise ValueError("page token time without a time zone")
    try:
        after = after.astimezone(UTC)  # as the column stores it; may leave datetime's range
    except OverflowError:
        raise ValueError("page token time out of range") from None
    if not isinstance(last_id, str):
        raise ValueError("page token id is not a string")
    return after, str(uuid.UUID(last_id)), str(filter_text)

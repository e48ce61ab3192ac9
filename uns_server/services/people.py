"""Managing people and rotations: the one implementation behind ``uns.v1.RecipientService``
and ``uns-admin recipients|rotations|oncall``.

Puts create or replace by id; every put and delete writes an audit record (actor, time,
content) in the same transaction. Contacts are checked against this server's channels
(``kinds``: name to ``ChannelKind``); ``None`` checks nothing there (``uns-admin`` on
the database has no server's configuration, like ``PolicyService``). Listing is by id
with AIP-158 paging; the page token is an opaque encoding of the last id returned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from uns_server.domain import paging
from uns_server.domain.errors import FieldViolation, InvalidRequest, NotFound, RecipientInUse
from uns_server.domain.fields import time_problem
from uns_server.domain.oncall import OnCall, on_call
from uns_server.domain.people import ChannelKind, Recipient, Rotation, check_contacts, check_id
from uns_server.store.port import MissingPeople, PersonFirstPutRace, StillReferenced, Store

Clock = Callable[[], datetime]

_TOKEN_VERSION = 1
_PUT_RETRIES = 3


def _encode(kind: str, last: str) -> str:
    return paging.encode_token(_TOKEN_VERSION, kind, last)


def _decode(token: str, kind: str) -> str | None:
    if not token:
        return None
    try:
        version, token_kind, last = paging.decode_token(token, 3)
        if version != _TOKEN_VERSION or token_kind != kind or not isinstance(last, str):
            raise ValueError(token)
    except ValueError:
        raise InvalidRequest.of_field("page_token", "not a token from this server") from None
    return last


def _recipient_not_found(recipient_id: str) -> NotFound:
    return NotFound(f"no recipient {recipient_id}", metadata={"recipient_id": recipient_id})


def _rotation_not_found(rotation_id: str) -> NotFound:
    return NotFound(f"no rotation {rotation_id}", metadata={"rotation_id": rotation_id})


class PeopleService:
    def __init__(
        self, store: Store, clock: Clock, kinds: Mapping[str, ChannelKind] | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._kinds = kinds

    # People ---------------------------------------------------------------------

    async def put_recipient(self, actor: str, recipient: Recipient) -> Recipient:
        if self._kinds is not None:
            check_contacts(recipient, self._kinds)
        for attempt in range(_PUT_RETRIES):
            try:
                async with self._store.write() as tx:
                    return await tx.people.put_recipient(recipient, actor=actor, now=self._clock())
            except PersonFirstPutRace:
                if attempt == _PUT_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def get_recipient(self, recipient_id: str) -> Recipient:
        check_id(recipient_id, "recipient_id")
        async with self._store.read() as tx:
            found = await tx.people.get_recipient(recipient_id)
        if found is None:
            raise _recipient_not_found(recipient_id)
        return found

    async def list_recipients(
        self, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Recipient], str]:
        limit = paging.page_limit(page_size)
        after = _decode(page_token, "recipients")
        async with self._store.read() as tx:
            rows = list(await tx.people.list_recipients(after=after, limit=limit + 1))
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        return rows, _encode("recipients", rows[-1].recipient_id)

    async def delete_recipient(self, actor: str, recipient_id: str) -> Recipient:
        """RECIPIENT_IN_USE while a rotation names the person, or while an open
        obligation (delivery or ack PENDING) names or was sent to them (SPEC §6)."""
        check_id(recipient_id, "recipient_id")
        try:
            async with self._store.write() as tx:
                found = await tx.people.get_recipient(recipient_id)
                if found is None:
                    raise _recipient_not_found(recipient_id)
                using = list(await tx.people.referencing_rotations(recipient_id))
                if using:
                    raise _in_use(recipient_id, using)
                owed = list(await tx.people.owing_notifications(recipient_id))
                if owed:
                    raise _owed(recipient_id, owed)
                await tx.people.delete_recipient(found, actor=actor, now=self._clock())
                return found
        except StillReferenced:
            # A rotation naming the person committed between the check and the delete.
            async with self._store.read() as tx:
                using = list(await tx.people.referencing_rotations(recipient_id))
            raise _in_use(recipient_id, using) from None

    # Rotations ------------------------------------------------------------------

    async def put_rotation(self, actor: str, rotation: Rotation) -> Rotation:
        """Every member and override recipient must exist (INVALID_REQUEST naming them)."""
        for attempt in range(_PUT_RETRIES):
            try:
                async with self._store.write() as tx:
                    existing = await tx.people.existing_recipients(rotation.referenced())
                    _check_people(rotation, existing)
                    return await tx.people.put_rotation(rotation, actor=actor, now=self._clock())
            except MissingPeople:
                if attempt == _PUT_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def get_rotation(self, rotation_id: str) -> Rotation:
        check_id(rotation_id, "rotation_id")
        async with self._store.read() as tx:
            found = await tx.people.get_rotation(rotation_id)
        if found is None:
            raise _rotation_not_found(rotation_id)
        return found

    async def list_rotations(
        self, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[Rotation], str]:
        limit = paging.page_limit(page_size)
        after = _decode(page_token, "rotations")
        async with self._store.read() as tx:
            rows = list(await tx.people.list_rotations(after=after, limit=limit + 1))
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        return rows, _encode("rotations", rows[-1].rotation_id)

    async def delete_rotation(self, actor: str, rotation_id: str) -> Rotation:
        check_id(rotation_id, "rotation_id")
        async with self._store.write() as tx:
            found = await tx.people.get_rotation(rotation_id)
            if found is None:
                raise _rotation_not_found(rotation_id)
            await tx.people.delete_rotation(found, actor=actor, now=self._clock())
            return found

    async def on_call(
        self, rotation_id: str, at: datetime | None = None
    ) -> tuple[Rotation, datetime, OnCall]:
        """The rotation, the instant asked about (now when None), and the answer."""
        if at is not None and (problem := time_problem(at)):
            raise InvalidRequest.of_field("time", problem)
        rotation = await self.get_rotation(rotation_id)
        when = at if at is not None else self._clock()
        return rotation, when, on_call(rotation, when)


def _in_use(recipient_id: str, rotations: list[str]) -> RecipientInUse:
    return RecipientInUse(
        f"recipient {recipient_id} is still named by rotation(s) {', '.join(rotations)}",
        metadata={"recipient_id": recipient_id, "rotations": ",".join(rotations)},
    )


def _owed(recipient_id: str, notification_ids: list[str]) -> RecipientInUse:
    return RecipientInUse(
        f"recipient {recipient_id} is still owed an answer by notification(s) "
        f"{', '.join(notification_ids)}; withdraw or settle them first",
        metadata={"recipient_id": recipient_id, "notifications": ",".join(notification_ids)},
    )


def _check_people(rotation: Rotation, existing: set[str]) -> None:
    violations: list[FieldViolation] = []
    for i, member in enumerate(rotation.members):
        if member not in existing:
            violations.append(FieldViolation(f"rotation.members[{i}]", f"no recipient {member}"))
    for i, o in enumerate(rotation.overrides):
        if o.recipient_id not in existing:
            violations.append(
                FieldViolation(
                    f"rotation.overrides[{i}].recipient_id", f"no recipient {o.recipient_id}"
                )
            )
    if violations:
        raise InvalidRequest(
            f"{violations[0].field}: {violations[0].description}",
            metadata={"fields": ",".join(v.field for v in violations)},
            violations=violations,
        )

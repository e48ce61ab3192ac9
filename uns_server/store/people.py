"""The people port (``store.port.People``): people and rotations, ``uns_recipients``,
``uns_rotations``, ``uns_rotation_refs`` and their audit records. One method per query;
rows become ``domain.people`` values.

A rotation's references (members and override recipients) are rows of
``uns_rotation_refs`` with a foreign key to the person: deleting a referenced person
fails with ``StillReferenced`` whatever commits concurrently, and putting a rotation
that names a person deleted meanwhile fails with ``MissingPeople``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import RowMapping, delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from uns_server.domain.documents import NotificationDocument
from uns_server.domain.outcomes import provider_refs_from_json
from uns_server.domain.people import Contact, Recipient, Rotation
from uns_server.domain.schedule.quiet_hours import QuietHours
from uns_server.domain.staged_rules import NotificationRule
from uns_server.store.bound import Bound
from uns_server.store.port.values import MissingPeople, StillReferenced
from uns_server.store.port.values import PersonFirstPutRace as FirstPutRace
from uns_server.store.tables import (
    notifications,
    people_audit_records,
    recipients,
    rotation_refs,
    rotations,
)


def _recipient(row: RowMapping) -> Recipient:
    quiet = row["quiet_hours"]
    return Recipient(
        recipient_id=row["recipient_id"],
        display_name=row["display_name"],
        time_zone=row["time_zone"],
        contacts=tuple(Contact(c["channel"], c["address"]) for c in row["contacts"]),
        quiet_hours=QuietHours.from_json(quiet) if quiet else None,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
        locale=row["locale"] or "",
        notification_rules=tuple(
            NotificationRule.from_json(r) for r in row["notification_rules"] or ()
        ),
    )


def _rotation(row: RowMapping) -> Rotation:
    return Rotation(
        rotation_id=row["rotation_id"],
        members=tuple(row["members"]),
        start=row["start_time"],
        shift=timedelta(seconds=row["shift_seconds"]),
        time_zone=row["time_zone"],
        overrides=Rotation.overrides_from_json(row["overrides"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
    )


def recipient_json(r: Recipient) -> dict[str, Any]:
    return {
        "recipient_id": r.recipient_id,
        "display_name": r.display_name,
        "time_zone": r.time_zone,
        "contacts": r.contacts_json(),
        "quiet_hours": r.quiet_hours.to_json() if r.quiet_hours else None,
        **({"locale": r.locale} if r.locale else {}),
        **({"notification_rules": r.rules_json()} if r.notification_rules else {}),
    }


def rotation_json(r: Rotation) -> dict[str, Any]:
    return {
        "rotation_id": r.rotation_id,
        "members": list(r.members),
        "start_time": r.start.isoformat(),
        "shift_seconds": int(r.shift.total_seconds()),
        "time_zone": r.time_zone,
        "overrides": r.overrides_json(),
    }


def _names(doc: Mapping[str, Any], refs: Mapping[str, Any] | None, recipient_id: str) -> bool:
    effective = NotificationDocument.from_json(doc).effective
    targets = [*effective.targets, *(t for step in effective.escalation for t in step.targets)]
    if any(t.recipient_id == recipient_id for t in targets):
        return True
    sent = provider_refs_from_json(refs) or {}
    return any(r.recipient_id == recipient_id for r in sent.values())


class SqlPeopleReads(Bound):
    __slots__ = ()

    async def get_recipient(self, recipient_id: str) -> Recipient | None:
        q = select(recipients).where(recipients.c.recipient_id == recipient_id)
        row = (await self._conn.execute(q)).mappings().first()
        return _recipient(row) if row else None

    async def list_recipients(self, *, after: str | None, limit: int) -> list[Recipient]:
        q = select(recipients)
        if after is not None:
            q = q.where(recipients.c.recipient_id > after)
        rows = (
            await self._conn.execute(q.order_by(recipients.c.recipient_id).limit(limit))
        ).mappings()
        return [_recipient(r) for r in rows]

    async def recipients_by_id(self, ids: Collection[str]) -> dict[str, Recipient]:
        """The named people that exist."""
        if not ids:
            return {}
        q = select(recipients).where(recipients.c.recipient_id.in_(sorted(ids)))
        return {
            r.recipient_id: r for r in map(_recipient, (await self._conn.execute(q)).mappings())
        }

    async def existing_recipients(self, ids: Collection[str]) -> set[str]:
        if not ids:
            return set()
        q = select(recipients.c.recipient_id).where(recipients.c.recipient_id.in_(sorted(ids)))
        return set((await self._conn.execute(q)).scalars())

    async def get_rotation(self, rotation_id: str) -> Rotation | None:
        q = select(rotations).where(rotations.c.rotation_id == rotation_id)
        row = (await self._conn.execute(q)).mappings().first()
        return _rotation(row) if row else None

    async def list_rotations(self, *, after: str | None, limit: int) -> list[Rotation]:
        q = select(rotations)
        if after is not None:
            q = q.where(rotations.c.rotation_id > after)
        rows = (
            await self._conn.execute(q.order_by(rotations.c.rotation_id).limit(limit))
        ).mappings()
        return [_rotation(r) for r in rows]

    async def rotations_by_id(self, ids: Collection[str]) -> dict[str, Rotation]:
        """The named rotations that exist."""
        if not ids:
            return {}
        q = select(rotations).where(rotations.c.rotation_id.in_(sorted(ids)))
        return {r.rotation_id: r for r in map(_rotation, (await self._conn.execute(q)).mappings())}

    async def existing_rotations(self, ids: Collection[str]) -> set[str]:
        if not ids:
            return set()
        q = select(rotations.c.rotation_id).where(rotations.c.rotation_id.in_(sorted(ids)))
        return set((await self._conn.execute(q)).scalars())

    async def referencing_rotations(self, recipient_id: str) -> list[str]:
        q = (
            select(rotation_refs.c.rotation_id)
            .where(rotation_refs.c.recipient_id == recipient_id)
            .order_by(rotation_refs.c.rotation_id)
        )
        return list((await self._conn.execute(q)).scalars())

    async def owing_notifications(self, recipient_id: str, limit: int = 10) -> list[str]:
        """Open obligations (a delivery still PENDING, or an ack still PENDING) that owe
        ``recipient_id`` an answer: their frozen targets name the person, or a message
        was sent to them (a provider reference carries their id). Read in Python over
        the open rows only (JSON paths differ by dialect; open work is the small part)."""
        q = select(
            notifications.c.id, notifications.c.notification, notifications.c.provider_refs
        ).where(or_(notifications.c.status == "PENDING", notifications.c.ack_status == "PENDING"))
        out: list[str] = []
        for row in (await self._conn.execute(q)).mappings():
            if _names(row["notification"], row["provider_refs"], recipient_id):
                out.append(row["id"])
                if len(out) >= limit:
                    break
        return out


class SqlPeople(SqlPeopleReads):
    __slots__ = ()

    async def put_recipient(self, recipient: Recipient, *, actor: str, now: datetime) -> Recipient:
        values = {
            "display_name": recipient.display_name,
            "time_zone": recipient.time_zone,
            "contacts": recipient.contacts_json(),
            "quiet_hours": recipient.quiet_hours.to_json() if recipient.quiet_hours else None,
            "locale": recipient.locale,
            "notification_rules": recipient.rules_json() or None,
            "updated_at": now,
            "updated_by": actor,
        }
        changed = await self._conn.execute(
            update(recipients)
            .where(recipients.c.recipient_id == recipient.recipient_id)
            .values(**values)
        )
        if changed.rowcount == 0:
            try:
                await self._conn.execute(
                    insert(recipients).values(
                        recipient_id=recipient.recipient_id, created_at=now, **values
                    )
                )
            except IntegrityError as exc:
                raise FirstPutRace(recipient.recipient_id) from exc
        await self._audit(
            "recipient", recipient.recipient_id, "PUT", actor, recipient_json(recipient), now
        )
        stored = await self.get_recipient(recipient.recipient_id)
        assert stored is not None
        return stored

    async def delete_recipient(self, recipient: Recipient, *, actor: str, now: datetime) -> None:
        """Raises ``StillReferenced`` when a rotation names the person (foreign key); the
        caller's transaction is then unusable and must roll back (it does, as the error
        leaves ``Database.write``)."""
        try:
            await self._conn.execute(
                delete(recipients).where(recipients.c.recipient_id == recipient.recipient_id)
            )
        except IntegrityError as exc:
            raise StillReferenced(recipient.recipient_id) from exc
        await self._audit(
            "recipient", recipient.recipient_id, "DELETE", actor, recipient_json(recipient), now
        )

    async def put_rotation(self, rotation: Rotation, *, actor: str, now: datetime) -> Rotation:
        """Raises ``MissingPeople`` when a named person does not exist (foreign key) or a
        concurrent first put of the same id won (primary key): a retry tells them apart."""
        values = {
            "members": list(rotation.members),
            "start_time": rotation.start,
            "shift_seconds": int(rotation.shift.total_seconds()),
            "time_zone": rotation.time_zone,
            "overrides": rotation.overrides_json(),
            "updated_at": now,
            "updated_by": actor,
        }
        try:
            changed = await self._conn.execute(
                update(rotations)
                .where(rotations.c.rotation_id == rotation.rotation_id)
                .values(**values)
            )
            if changed.rowcount == 0:
                await self._conn.execute(
                    insert(rotations).values(
                        rotation_id=rotation.rotation_id, created_at=now, **values
                    )
                )
            await self._conn.execute(
                delete(rotation_refs).where(rotation_refs.c.rotation_id == rotation.rotation_id)
            )
            await self._conn.execute(
                insert(rotation_refs),
                [
                    {"rotation_id": rotation.rotation_id, "recipient_id": who}
                    for who in sorted(rotation.referenced())
                ],
            )
        except IntegrityError as exc:
            raise MissingPeople(rotation.rotation_id) from exc
        await self._audit(
            "rotation", rotation.rotation_id, "PUT", actor, rotation_json(rotation), now
        )
        stored = await self.get_rotation(rotation.rotation_id)
        assert stored is not None
        return stored

    async def delete_rotation(self, rotation: Rotation, *, actor: str, now: datetime) -> None:
        await self._conn.execute(
            delete(rotation_refs).where(rotation_refs.c.rotation_id == rotation.rotation_id)
        )
        await self._conn.execute(
            delete(rotations).where(rotations.c.rotation_id == rotation.rotation_id)
        )
        await self._audit(
            "rotation", rotation.rotation_id, "DELETE", actor, rotation_json(rotation), now
        )

    async def _audit(
        self,
        kind: str,
        object_id: str,
        action: str,
        actor: str,
        content: Mapping[str, Any],
        now: datetime,
    ) -> None:
        await self._conn.execute(
            insert(people_audit_records).values(
                id=str(uuid.uuid4()),
                kind=kind,
                object_id=object_id,
                action=action,
                actor=actor,
                content=dict(content),
                created_at=now,
            )
        )

"""The SQL implementation of the directory ports (``store.port.directory``: API keys,
revoked action links, policies, people and rotations), bound like ``sql_ports``."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime

from uns_server.domain.people import Recipient, Rotation
from uns_server.domain.policy import PolicyRevision, PolicySpec
from uns_server.domain.records import ApiKey
from uns_server.store import api_keys, links, people, policies
from uns_server.store.bound import Bound


class SqlApiKeyReads(Bound):
    __slots__ = ()

    async def active_by_hash(self, key_hash: str) -> ApiKey | None:
        return await api_keys.active_by_hash(self._conn, key_hash)

    async def list_keys(self) -> Sequence[ApiKey]:
        return await api_keys.list_keys(self._conn)

    async def count_active(self) -> int:
        return await api_keys.count_active(self._conn)


class SqlApiKeys(SqlApiKeyReads):
    __slots__ = ()

    async def insert(
        self,
        *,
        key_id: str,
        key_hash: str,
        prefix: str,
        principal: str,
        roles: Sequence[str],
        responds_for: Sequence[str],
        description: str,
        now: datetime,
    ) -> None:
        await api_keys.insert_key(
            self._conn,
            key_id=key_id,
            key_hash=key_hash,
            prefix=prefix,
            principal=principal,
            roles=roles,
            responds_for=responds_for,
            description=description,
            now=now,
        )

    async def revoke(self, id_or_prefix: str, now: datetime) -> int:
        return await api_keys.revoke(self._conn, id_or_prefix, now)

    async def lock_dev_key(self) -> None:
        await api_keys.lock_dev_key(self._conn)


class SqlActionLinkReads(Bound):
    __slots__ = ()

    async def is_revoked(self, token_hash: str) -> bool:
        return await links.is_revoked(self._conn, token_hash)


class SqlActionLinks(SqlActionLinkReads):
    __slots__ = ()

    async def revoke(
        self, token_hash: str, notification_id: str, *, actor: str, now: datetime
    ) -> None:
        await links.revoke(self._conn, token_hash, notification_id, actor=actor, now=now)


class SqlPolicyReads(Bound):
    __slots__ = ()

    async def active(self, notification_type: str) -> PolicyRevision | None:
        return await policies.active(self._conn, notification_type)

    async def active_many(
        self, notification_types: Collection[str]
    ) -> Mapping[str, PolicyRevision]:
        return await policies.active_many(self._conn, notification_types)

    async def get(self, notification_type: str, revision: int) -> PolicyRevision | None:
        return await policies.get(self._conn, notification_type, revision)

    async def list_revisions(
        self, notification_type: str, *, before_revision: int | None, limit: int
    ) -> Sequence[PolicyRevision]:
        return await policies.list_revisions(
            self._conn, notification_type, before_revision=before_revision, limit=limit
        )


class SqlPolicies(SqlPolicyReads):
    __slots__ = ()

    async def put_revision(
        self, notification_type: str, spec: PolicySpec, *, actor: str, now: datetime
    ) -> PolicyRevision:
        return await policies.put_revision(
            self._conn, notification_type, spec, actor=actor, now=now
        )

    async def activate(
        self, notification_type: str, revision: int, *, now: datetime
    ) -> PolicyRevision | None:
        return await policies.activate(self._conn, notification_type, revision, now=now)


class SqlPeopleReads(Bound):
    __slots__ = ()

    async def get_recipient(self, recipient_id: str) -> Recipient | None:
        return await people.get_recipient(self._conn, recipient_id)

    async def list_recipients(self, *, after: str | None, limit: int) -> Sequence[Recipient]:
        return await people.list_recipients(self._conn, after=after, limit=limit)

    async def recipients_by_id(self, ids: Collection[str]) -> Mapping[str, Recipient]:
        return await people.recipients_by_id(self._conn, ids)

    async def existing_recipients(self, ids: Collection[str]) -> set[str]:
        return await people.existing_recipients(self._conn, ids)

    async def get_rotation(self, rotation_id: str) -> Rotation | None:
        return await people.get_rotation(self._conn, rotation_id)

    async def list_rotations(self, *, after: str | None, limit: int) -> Sequence[Rotation]:
        return await people.list_rotations(self._conn, after=after, limit=limit)

    async def rotations_by_id(self, ids: Collection[str]) -> Mapping[str, Rotation]:
        return await people.rotations_by_id(self._conn, ids)

    async def existing_rotations(self, ids: Collection[str]) -> set[str]:
        return await people.existing_rotations(self._conn, ids)

    async def referencing_rotations(self, recipient_id: str) -> Sequence[str]:
        return await people.referencing_rotations(self._conn, recipient_id)

    async def owing_notifications(self, recipient_id: str, limit: int = 10) -> Sequence[str]:
        return await people.owing_notifications(self._conn, recipient_id, limit)


class SqlPeople(SqlPeopleReads):
    __slots__ = ()

    async def put_recipient(self, recipient: Recipient, *, actor: str, now: datetime) -> Recipient:
        return await people.put_recipient(self._conn, recipient, actor=actor, now=now)

    async def delete_recipient(self, recipient: Recipient, *, actor: str, now: datetime) -> None:
        await people.delete_recipient(self._conn, recipient, actor=actor, now=now)

    async def put_rotation(self, rotation: Rotation, *, actor: str, now: datetime) -> Rotation:
        return await people.put_rotation(self._conn, rotation, actor=actor, now=now)

    async def delete_rotation(self, rotation: Rotation, *, actor: str, now: datetime) -> None:
        await people.delete_rotation(self._conn, rotation, actor=actor, now=now)

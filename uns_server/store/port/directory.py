"""What operators configure and what answers check: API keys, policies, people and
rotations, and revoked action links."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from uns_server.domain.people import Recipient, Rotation
from uns_server.domain.policy import PolicyRevision, PolicySpec
from uns_server.domain.records import ApiKey


class ApiKeyReads(Protocol):
    async def active_by_hash(self, key_hash: str) -> ApiKey | None:
        """The unrevoked key with this digest."""
        ...

    async def list_keys(self) -> Sequence[ApiKey]:
        """Every key, revoked ones too, oldest first."""
        ...

    async def count_active(self) -> int:
        """How many keys are not revoked."""
        ...


class ApiKeys(ApiKeyReads, Protocol):
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
        """Store a new key (only its digest)."""
        ...

    async def revoke(self, id_or_prefix: str, now: datetime) -> int:
        """Revoke the key with this id or prefix; how many were."""
        ...

    async def lock_dev_key(self) -> None:
        """Serialise dev-key minting until this transaction ends."""
        ...


class ActionLinkReads(Protocol):
    async def is_revoked(self, token_hash: str) -> bool:
        """Was the action link with this digest revoked (used up)?"""
        ...


class ActionLinks(ActionLinkReads, Protocol):
    async def revoke(
        self, token_hash: str, notification_id: str, *, actor: str, now: datetime
    ) -> None:
        """Revoke an action link (once; a second revoke changes nothing)."""
        ...


class PolicyReads(Protocol):
    async def active(self, notification_type: str) -> PolicyRevision | None:
        """The type's ACTIVE revision."""
        ...

    async def active_many(
        self, notification_types: Collection[str]
    ) -> Mapping[str, PolicyRevision]:
        """The ACTIVE revision of each type that has one, by type."""
        ...

    async def get(self, notification_type: str, revision: int) -> PolicyRevision | None:
        """One revision of the type's policy."""
        ...

    async def list_revisions(
        self, notification_type: str, *, before_revision: int | None, limit: int
    ) -> Sequence[PolicyRevision]:
        """The type's revisions, newest first, below ``before_revision``."""
        ...


class Policies(PolicyReads, Protocol):
    async def put_revision(
        self, notification_type: str, spec: PolicySpec, *, actor: str, now: datetime
    ) -> PolicyRevision:
        """Write a new revision, or return the latest one when its content is identical.
        Raises ``PolicyFirstPutRace`` when a concurrent first put of the type won."""
        ...

    async def activate(
        self, notification_type: str, revision: int, *, now: datetime
    ) -> PolicyRevision | None:
        """Make ``revision`` the ACTIVE one (None: no such revision)."""
        ...


class PeopleReads(Protocol):
    async def get_recipient(self, recipient_id: str) -> Recipient | None: ...
    async def list_recipients(self, *, after: str | None, limit: int) -> Sequence[Recipient]:
        """People by id, after ``after``."""
        ...

    async def recipients_by_id(self, ids: Collection[str]) -> Mapping[str, Recipient]:
        """The named people that exist, by id."""
        ...

    async def existing_recipients(self, ids: Collection[str]) -> set[str]: ...
    async def get_rotation(self, rotation_id: str) -> Rotation | None: ...
    async def list_rotations(self, *, after: str | None, limit: int) -> Sequence[Rotation]:
        """Rotations by id, after ``after``."""
        ...

    async def rotations_by_id(self, ids: Collection[str]) -> Mapping[str, Rotation]:
        """The named rotations that exist, by id."""
        ...

    async def existing_rotations(self, ids: Collection[str]) -> set[str]: ...
    async def referencing_rotations(self, recipient_id: str) -> Sequence[str]:
        """The rotations that name the person."""
        ...

    async def owing_notifications(self, recipient_id: str, limit: int = 10) -> Sequence[str]:
        """Open obligations that name the person (deletion is refused while any; an
        SMS reply looks for the answer it gives among them)."""
        ...


class People(PeopleReads, Protocol):
    """People and rotations; every change leaves an audit record."""

    async def put_recipient(self, recipient: Recipient, *, actor: str, now: datetime) -> Recipient:
        """Create or replace; raises ``PersonFirstPutRace`` when a concurrent first put
        won (a retry updates its row)."""
        ...

    async def delete_recipient(self, recipient: Recipient, *, actor: str, now: datetime) -> None:
        """Raises ``StillReferenced`` when a rotation names the person."""
        ...

    async def put_rotation(self, rotation: Rotation, *, actor: str, now: datetime) -> Rotation:
        """Create or replace; raises ``MissingPeople`` when a named person does not
        exist or a concurrent first put of the same id won (a retry tells them apart)."""
        ...

    async def delete_rotation(self, rotation: Rotation, *, actor: str, now: datetime) -> None: ...

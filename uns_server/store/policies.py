"""The policies port (``store.port.Policies``): policy revisions, immutable rows, one
ACTIVE pointer per notification type."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Select, any_, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError

from uns_server.domain.policy import PolicyRevision, PolicySpec, content_hash
from uns_server.store import pg, records
from uns_server.store.bound import Bound
from uns_server.store.port.values import PolicyFirstPutRace as FirstPutRace
from uns_server.store.tables import policies, policy_revisions

# The columns ``records.policy_revision`` reads: a revision joined to its policy.
_COLUMNS = (
    policies.c.id,
    policies.c.notification_type,
    policies.c.active_revision,
    policy_revisions.c.revision,
    policy_revisions.c.content,
    policy_revisions.c.content_hash,
    policy_revisions.c.created_by,
    policy_revisions.c.created_at,
    policy_revisions.c.activated_at,
)


def _joined() -> Select[Any]:
    return select(*_COLUMNS).join(policy_revisions, policy_revisions.c.policy_id == policies.c.id)


_ACTIVE_MANY_PG = pg.Statement(
    _joined().where(
        policies.c.notification_type == any_(bindparam("types")),
        policy_revisions.c.revision == policies.c.active_revision,
    )
)


class SqlPolicyReads(Bound):
    __slots__ = ()

    async def active(self, notification_type: str) -> PolicyRevision | None:
        q = _joined().where(
            policies.c.notification_type == notification_type,
            policy_revisions.c.revision == policies.c.active_revision,
        )
        row = (await self._conn.execute(q)).mappings().first()
        return records.policy_revision(row) if row else None

    async def active_many(self, notification_types: Collection[str]) -> dict[str, PolicyRevision]:
        """The ACTIVE revision of each type that has one, by type."""
        if not notification_types:
            return {}
        driver = pg.driver(self._conn)
        if driver is not None:
            rows: Iterable[pg.Row] = await _ACTIVE_MANY_PG.fetch(
                driver, {"types": sorted(notification_types)}
            )
        else:
            q = _joined().where(
                policies.c.notification_type.in_(sorted(notification_types)),
                policy_revisions.c.revision == policies.c.active_revision,
            )
            rows = (await self._conn.execute(q)).mappings()
        revisions = (records.policy_revision(row) for row in rows)
        return {r.notification_type: r for r in revisions}

    async def get(self, notification_type: str, revision: int) -> PolicyRevision | None:
        q = _joined().where(
            policies.c.notification_type == notification_type,
            policy_revisions.c.revision == revision,
        )
        row = (await self._conn.execute(q)).mappings().first()
        return records.policy_revision(row) if row else None

    async def list_revisions(
        self, notification_type: str, *, before_revision: int | None, limit: int
    ) -> list[PolicyRevision]:
        q = _joined().where(policies.c.notification_type == notification_type)
        if before_revision is not None:
            q = q.where(policy_revisions.c.revision < before_revision)
        rows = (
            await self._conn.execute(q.order_by(policy_revisions.c.revision.desc()).limit(limit))
        ).mappings()
        return [records.policy_revision(r) for r in rows]


class SqlPolicies(SqlPolicyReads):
    __slots__ = ()

    async def put_revision(
        self, notification_type: str, spec: PolicySpec, *, actor: str, now: datetime
    ) -> PolicyRevision:
        """Write a new revision, or return the latest one when its content is identical.
        Raises ``FirstPutRace`` when a concurrent first put of the type won."""
        q = select(policies).where(policies.c.notification_type == notification_type)
        policy = (await self._conn.execute(q.with_for_update())).mappings().first()
        if policy is None:
            policy_id = str(uuid.uuid4())
            try:
                await self._conn.execute(
                    insert(policies).values(
                        id=policy_id,
                        notification_type=notification_type,
                        active_revision=None,
                        created_at=now,
                        updated_at=now,
                    )
                )
            except IntegrityError as exc:
                raise FirstPutRace(notification_type) from exc
            latest = None
        else:
            policy_id = policy["id"]
            revisions = await self.list_revisions(notification_type, before_revision=None, limit=1)
            latest = revisions[0] if revisions else None
        digest = content_hash(spec)
        if latest is not None and latest.content_hash == digest:
            return latest
        revision = (latest.revision if latest else 0) + 1
        await self._conn.execute(
            insert(policy_revisions).values(
                policy_id=policy_id,
                revision=revision,
                content=spec.to_json(),
                content_hash=digest,
                created_by=actor,
                created_at=now,
                activated_at=None,
            )
        )
        created = await self.get(notification_type, revision)
        assert created is not None
        return created

    async def activate(
        self, notification_type: str, revision: int, *, now: datetime
    ) -> PolicyRevision | None:
        target = await self.get(notification_type, revision)
        if target is None:
            return None
        await self._conn.execute(
            update(policies)
            .where(policies.c.id == target.policy_id)
            .values(active_revision=revision, updated_at=now)
        )
        await self._conn.execute(
            update(policy_revisions)
            .where(policy_revisions.c.policy_id == target.policy_id)
            .where(policy_revisions.c.revision == revision)
            .values(activated_at=now)
        )
        return await self.get(notification_type, revision)

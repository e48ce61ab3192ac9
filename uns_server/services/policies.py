"""Managing policy revisions: the one implementation behind ``uns.v1.PolicyService``
and ``uns-admin policies``.

Revisions are immutable; putting content identical to the latest revision returns it
unchanged. Activation swaps the type's ACTIVE pointer; notifications already accepted
keep the policy they froze. Listing is newest first with AIP-158 paging; the page
token is an opaque encoding of the last revision returned (and its type). Reading
policy files (``uns-admin``) is ``services.policy_documents``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from uns_server.domain import paging
from uns_server.domain.errors import (
    FieldViolation,
    InvalidRequest,
    NotFound,
    UnknownPolicyChannel,
)
from uns_server.domain.policy import PolicyRevision, PolicySpec
from uns_server.domain.targets import Target
from uns_server.domain.validation import _notification_type
from uns_server.store.port import PolicyFirstPutRace, Store

Clock = Callable[[], datetime]

# Two first puts of one new type race on the unique notification_type; the loser
# retries and then sees the winner's row.
_INSERT_RACE_RETRIES = 3
_TOKEN_VERSION = 1
_INT32_MAX = 2**31 - 1  # revisions are int32 on the wire and in the table


@dataclass(frozen=True)
class PolicyInput:
    """One revision to write: a notification type and its validated content."""

    notification_type: str
    spec: PolicySpec


def validate_type(notification_type: str, field: str = "notification_type") -> str:
    problems = _notification_type(notification_type)
    if problems:
        raise InvalidRequest(
            f"{field}: {'; '.join(problems)}",
            metadata={"fields": field},
            violations=[FieldViolation(field, p) for p in problems],
        )
    return notification_type


def encode_page_token(notification_type: str, last_revision: int) -> str:
    return paging.encode_token(_TOKEN_VERSION, notification_type, last_revision)


def decode_page_token(token: str, notification_type: str) -> int:
    """The last revision of the previous page; INVALID_REQUEST on a foreign token."""
    try:
        version, token_type, last = paging.decode_token(token, 3)
        if isinstance(last, bool) or not isinstance(last, int) or not 1 <= last <= _INT32_MAX:
            raise ValueError(token)
        if version != _TOKEN_VERSION:
            raise ValueError(token)
    except ValueError:
        raise InvalidRequest.of_field("page_token", "not a token from this server") from None
    if token_type != notification_type:
        raise InvalidRequest.of_field(
            "page_token", "the token belongs to a different notification_type"
        )
    return last


def named_channels(spec: PolicySpec) -> list[tuple[str, str]]:
    """Every channel the spec names, with the field that names it: its channels and
    each escalation step's."""
    named = [(f"spec.channels[{i}]", name) for i, name in enumerate(spec.channels)]
    for i, step in enumerate(spec.escalation):
        named += [(f"spec.escalation[{i}].channels[{j}]", n) for j, n in enumerate(step.channels)]
    for i, rule in enumerate(spec.rules):
        named += [(f"spec.rules[{i}].channels[{j}]", n) for j, n in enumerate(rule.channels)]
    return named


def named_targets(spec: PolicySpec) -> list[tuple[str, Target]]:
    """Every target the spec names, with the field that names it."""
    named = [(f"spec.targets[{i}]", t) for i, t in enumerate(spec.targets)]
    for i, step in enumerate(spec.escalation):
        named += [(f"spec.escalation[{i}].targets[{j}]", t) for j, t in enumerate(step.targets)]
    for i, rule in enumerate(spec.rules):
        named += [(f"spec.rules[{i}].targets[{j}]", t) for j, t in enumerate(rule.targets)]
    return named


async def check_targets(store: Store, items: Sequence[PolicyInput]) -> None:
    """INVALID_REQUEST (SPEC §6) when a spec names a recipient or rotation that does
    not exist, listing every such field. A person deleted after this check is
    recorded as unreachable when a message would be sent (``workers.dispatch``)."""
    named = [(k, field, t) for k, item in enumerate(items) for field, t in named_targets(item.spec)]
    if not named:
        return
    async with store.read() as tx:
        people_found = await tx.people.existing_recipients(
            {t.recipient_id for _, _, t in named if t.recipient_id}
        )
        rotations_found = await tx.people.existing_rotations(
            {t.rotation_id for _, _, t in named if t.rotation_id}
        )
    violations: list[FieldViolation] = []
    many = len(items) > 1
    for k, field, t in named:
        at = f"policies[{k}].{field}" if many else field
        if t.rotation_id and t.rotation_id not in rotations_found:
            violations.append(FieldViolation(f"{at}.rotation_id", f"no rotation {t.rotation_id!r}"))
        elif t.recipient_id and t.recipient_id not in people_found:
            violations.append(
                FieldViolation(f"{at}.recipient_id", f"no recipient {t.recipient_id!r}")
            )
    if violations:
        fields = ",".join(v.field for v in violations)
        raise InvalidRequest(
            "; ".join(f"{v.field}: {v.description}" for v in violations),
            metadata={"fields": fields},
            violations=violations,
        )


def check_channels(items: Sequence[PolicyInput], known: Collection[str]) -> None:
    """UNKNOWN_CHANNEL (SPEC §6) when a spec names a channel not in ``known``, listing
    every such field; the channel names are in ``metadata.channels``."""
    violations: list[FieldViolation] = []
    missing: dict[str, None] = {}
    many = len(items) > 1
    for k, item in enumerate(items):
        for field, name in named_channels(item.spec):
            if name not in known:
                at = f"policies[{k}].{field}" if many else field
                violations.append(FieldViolation(at, f"this server has no channel {name!r}"))
                missing[name] = None
    if violations:
        names = ", ".join(missing)
        have = ", ".join(sorted(known)) or "none"
        raise UnknownPolicyChannel(
            f"no such channel on this server: {names} (it has: {have})",
            metadata={
                "channels": ",".join(missing),
                "fields": ",".join(v.field for v in violations),
            },
            violations=violations,
        )


class PolicyService:
    """``channels`` is the set a policy may name (this server's configured channels);
    ``None`` checks nothing (``uns-admin`` on the database, which has no server's
    configuration)."""

    def __init__(self, store: Store, clock: Clock, channels: Collection[str] | None = None) -> None:
        self._store = store
        self._clock = clock
        self._channels = channels

    async def put(self, actor: str, item: PolicyInput, *, activate: bool = False) -> PolicyRevision:
        """Write one revision (or return the identical latest one); optionally activate it."""
        return (await self.put_many(actor, [item], activate=activate))[0]

    async def put_many(
        self, actor: str, items: Sequence[PolicyInput], *, activate: bool = False
    ) -> list[PolicyRevision]:
        """Write several revisions in one transaction: all of them or none."""
        for item in items:
            validate_type(item.notification_type)
        if self._channels is not None:
            check_channels(items, self._channels)
        await check_targets(self._store, items)
        for attempt in range(_INSERT_RACE_RETRIES):
            try:
                return await self._put_once(actor, items, activate)
            except PolicyFirstPutRace:
                if attempt == _INSERT_RACE_RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    async def _put_once(
        self, actor: str, items: Sequence[PolicyInput], activate: bool
    ) -> list[PolicyRevision]:
        now = self._clock()
        written: list[PolicyRevision] = []
        async with self._store.write() as tx:
            for item in items:
                revision = await tx.policies.put_revision(
                    item.notification_type, item.spec, actor=actor, now=now
                )
                if activate and not revision.active:
                    activated = await tx.policies.activate(
                        item.notification_type, revision.revision, now=now
                    )
                    assert activated is not None
                    revision = activated
                written.append(revision)
        return written

    async def activate(self, notification_type: str, revision: int) -> PolicyRevision:
        """Make ``revision`` the ACTIVE one; activating the ACTIVE revision changes nothing."""
        validate_type(notification_type)
        if revision < 1:
            raise InvalidRequest.of_field("revision", "must be a revision number (1 or more)")
        async with self._store.write() as tx:
            current = await tx.policies.get(notification_type, revision)
            if current is None:
                raise _not_found(notification_type, revision)
            if current.active:
                return current
            activated = await tx.policies.activate(notification_type, revision, now=self._clock())
            assert activated is not None
            return activated

    async def get(self, notification_type: str, revision: int = 0) -> PolicyRevision:
        """The ACTIVE revision (``revision`` 0) or the given one; NOT_FOUND otherwise."""
        validate_type(notification_type)
        if revision < 0:
            raise InvalidRequest.of_field(
                "revision", "must be 0 (the ACTIVE revision) or a revision number"
            )
        async with self._store.read() as tx:
            if revision == 0:
                found = await tx.policies.active(notification_type)
            else:
                found = await tx.policies.get(notification_type, revision)
        if found is None:
            raise _not_found(notification_type, revision)
        return found

    async def list(
        self, notification_type: str, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[PolicyRevision], str]:
        """One page of revisions, newest first, and the next page's token ("" at the end).

        An unknown type is an empty list, not NOT_FOUND: a type has revisions or not.
        """
        validate_type(notification_type)
        limit = paging.page_limit(page_size)
        before = decode_page_token(page_token, notification_type) if page_token else None
        async with self._store.read() as tx:
            rows = list(
                await tx.policies.list_revisions(
                    notification_type, before_revision=before, limit=limit + 1
                )
            )
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        return rows, encode_page_token(notification_type, rows[-1].revision)


def _not_found(notification_type: str, revision: int) -> NotFound:
    if revision == 0:
        return NotFound(
            f"no ACTIVE policy for {notification_type}",
            metadata={"notification_type": notification_type},
        )
    return NotFound(
        f"no revision {revision} of the policy for {notification_type}",
        metadata={"notification_type": notification_type, "revision": str(revision)},
    )

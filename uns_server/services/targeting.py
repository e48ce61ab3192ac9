"""Who a step asks (SPEC §6): a policy's or an escalation step's targets resolved to
people at the instant the message is sent, or planned (Simulate).

Rotations are read when asked, never frozen with the policy: the ACCEPTED event
freezes the targets as written, so a step that fires after a hand-off asks the person
on call then (``domain.oncall.resolve_targets``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from uns_server.domain.oncall import resolve_targets
from uns_server.domain.people import Recipient
from uns_server.domain.schedule import Step, StepKind
from uns_server.domain.targets import Target
from uns_server.store import people
from uns_server.store.db import Database


async def asked_by_step(
    db: Database, steps: Sequence[Step]
) -> dict[tuple[StepKind, int], tuple[str, ...]]:
    """Simulate's ``recipient_ids`` per planned step, each rotation resolved at the
    step's planned time; steps that ask nobody are left out."""
    named = {t.rotation_id for s in steps for t in s.targets if t.rotation_id}
    if not any(s.targets for s in steps):
        return {}
    async with db.read() as conn:
        rotations = await people.rotations_by_id(conn, named)
    out: dict[tuple[StepKind, int], tuple[str, ...]] = {}
    for s in steps:
        who = resolve_targets(s.targets, s.at, rotations)
        if who:
            out[(s.kind, s.number)] = who
    return out


async def people_at(
    db: Database, targets: Sequence[Target], at: datetime
) -> tuple[tuple[str, ...], Mapping[str, Recipient], tuple[str, ...]]:
    """The people ``targets`` ask at ``at`` (ids in order), those of them that exist,
    and the rotations that no longer exist (asked nobody)."""
    if not targets:
        return (), {}, ()
    async with db.read() as conn:
        rotations = await people.rotations_by_id(
            conn, {t.rotation_id for t in targets if t.rotation_id}
        )
        who = resolve_targets(targets, at, rotations)
        found = await people.recipients_by_id(conn, who)
    gone = tuple(t.rotation_id for t in targets if t.rotation_id and t.rotation_id not in rotations)
    return who, found, gone

"""Policy targets (SPEC §6 "People and on-call"): a person or a rotation a policy, or
one of its escalation steps, asks (``uns.v1.Target``).

A target is stored as it was written (``{"recipient_id": ...}`` or
``{"rotation_id": ...}``); it is resolved to a person only when a message is sent
(``domain.oncall.resolve_targets``), so a step that fires after a hand-off pages the
person on call then. This module has no dependency on people or rotations: the
schedule imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from uns_server.domain.errors import FieldViolation

# As ``domain.people``'s ids (kept here: ``domain.people`` imports the schedule).
_ID = re.compile(r"[a-z0-9._-]{1,64}")
TARGETS_MAX = 20


@dataclass(frozen=True)
class Target:
    """Exactly one of ``recipient_id`` (a person) and ``rotation_id`` (whoever is on
    call) is set."""

    recipient_id: str = ""
    rotation_id: str = ""

    def to_json(self) -> dict[str, str]:
        if self.rotation_id:
            return {"rotation_id": self.rotation_id}
        return {"recipient_id": self.recipient_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Target:
        return cls(str(data.get("recipient_id") or ""), str(data.get("rotation_id") or ""))

    @property
    def label(self) -> str:
        """``recipient:alice`` or ``rotation:primary`` (messages, logs)."""
        if self.rotation_id:
            return f"rotation:{self.rotation_id}"
        return f"recipient:{self.recipient_id}"


def targets_json(targets: Sequence[Target]) -> list[dict[str, str]]:
    return [t.to_json() for t in targets]


def targets_from_json(data: Sequence[Mapping[str, Any]] | None) -> tuple[Target, ...]:
    return tuple(Target.from_json(t) for t in data or ())


def target_violations(targets: Sequence[Target], field: str) -> list[FieldViolation]:
    """Shape only (one id, well formed, at most ``TARGETS_MAX``); whether the person or
    rotation exists is the policy service's check, on the database."""
    out: list[FieldViolation] = []
    if len(targets) > TARGETS_MAX:
        return [FieldViolation(field, f"at most {TARGETS_MAX} targets")]
    for i, t in enumerate(targets):
        at = f"{field}[{i}]"
        if bool(t.recipient_id) == bool(t.rotation_id):
            out.append(FieldViolation(at, "set exactly one of recipient_id and rotation_id"))
            continue
        name, value = (
            ("rotation_id", t.rotation_id) if t.rotation_id else ("recipient_id", t.recipient_id)
        )
        if _ID.fullmatch(value) is None:
            out.append(FieldViolation(f"{at}.{name}", "must be 1-64 characters of [a-z0-9._-]"))
    return out

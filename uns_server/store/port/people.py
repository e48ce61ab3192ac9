"""The people a policy's targets name: recipients (with their contacts) and on-call
rotations."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol

from uns_server.domain.people import Recipient, Rotation


class PeopleReads(Protocol):
    async def rotations_by_id(self, ids: Collection[str]) -> Mapping[str, Rotation]:
        """The named rotations that exist, by id."""
        ...

    async def recipients_by_id(self, ids: Collection[str]) -> Mapping[str, Recipient]:
        """The named people that exist, by id."""
        ...

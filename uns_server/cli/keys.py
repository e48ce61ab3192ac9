"""``uns-admin keys create|list|revoke``: one implementation for both modes.

The commands check their input, call a ``Keys`` and print the result, so the checks and
the output are the same on the database (``services.keys.KeyService``, ``cli.admin``)
and over ``uns.v1.KeyService`` (``cli.remote.keys.RemoteKeys``, with ``--target``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from uns_server.cli.errors import UsageError
from uns_server.domain.enums import Role
from uns_server.services import auth
from uns_server.services.keys import KeyInfo


class Keys(Protocol):
    """Where the keys are: the database, or a server."""

    async def create(
        self,
        principal: str,
        roles: Iterable[Role],
        description: str,
        responds_for: Iterable[str] = (),
    ) -> tuple[str, KeyInfo]: ...

    async def list_all(self) -> list[KeyInfo]: ...

    async def revoke(self, key: str) -> KeyInfo: ...


def responds_for_note(responds_for: Sequence[str]) -> str:
    """``, answering also for a,b`` for the key-created message."""
    return f", answering also for {','.join(responds_for)}" if responds_for else ""


def when(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def cmd_create(keys: Keys, args: argparse.Namespace) -> None:
    principal = args.principal.strip()
    if not principal:
        raise UsageError("--principal must not be empty")
    roles = [r for r in args.roles.split(",") if r.strip()]
    if not roles:
        raise UsageError("--roles needs at least one of producer, responder, operator")
    try:
        role_set = auth.parse_roles(roles)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    responds_for = sorted(auth.parse_responds_for(args.responds_for))
    if responds_for and Role.RESPONDER not in role_set:
        raise UsageError("--responds-for needs the responder role in --roles")
    secret, key = await keys.create(
        principal, role_set, args.description, responds_for=responds_for
    )
    print(secret, flush=True)
    print(
        f"created key {key.id} (prefix {key.prefix}) for {key.principal} with roles "
        f"{','.join(r.value for r in key.roles)}{responds_for_note(key.responds_for)}. "
        "The secret above is shown only once: store it now. "
        "Clients send it as 'authorization: Bearer <key>'.",
        file=sys.stderr,
    )


async def cmd_list(keys: Keys, args: argparse.Namespace) -> None:
    found = await keys.list_all()
    header = ("ID", "PREFIX", "PRINCIPAL", "ROLES", "RESPONDS_FOR", "CREATED", "REVOKED")
    table = [header] + [
        (
            k.id,
            k.prefix,
            k.principal,
            ",".join(r.value for r in k.roles),
            ",".join(k.responds_for) or "-",
            when(k.created_at),
            when(k.revoked_at) if k.revoked_at else "-",
        )
        for k in found
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


async def cmd_revoke(keys: Keys, args: argparse.Namespace) -> None:
    target = args.key.strip()
    if not target:
        raise UsageError("give a key id or prefix")
    key = await keys.revoke(target)
    print(
        f"revoked key {key.id} (prefix {key.prefix}, principal {key.principal}); "
        f"servers stop accepting it within {auth.CACHE_SECONDS:g} s",
        file=sys.stderr,
    )


Command = Callable[[Keys, argparse.Namespace], Awaitable[None]]

COMMANDS: dict[str, Command] = {
    "create": cmd_create,
    "list": cmd_list,
    "revoke": cmd_revoke,
}

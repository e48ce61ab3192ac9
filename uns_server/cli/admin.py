"""``uns-admin``: schema migrations, API keys, policies, people, maintenance windows,
retention and action-link revocation, directly on the database.

``keys`` and ``policies`` have one implementation each (``cli.keys``, ``cli.policies``)
that runs here on ``services.keys`` / ``services.policies`` (the services behind
``uns.v1.KeyService`` / ``uns.v1.PolicyService``, so validation and defaults are
identical) or, with ``--target``, on a server (``cli.remote``).

Exit codes: 0 ok; 2 usage or validation error (one line on stderr); 1 any other failure.
Secrets are printed only by ``keys create``, once, alone on stdout. ``maintain`` is a
dry run unless ``--apply`` is given (``uns_server.services.retention``).

The command line itself (commands, options, help) is ``cli.admin_parser``; this module
runs the database-mode commands and maps their failures to exit codes.

Size: one small database-mode wrapper per command group (keys, policies, people,
heartbeats, windows) beside the exit-code mapping they share; a next group should move
the wrappers into their groups' modules.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import getpass
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn
from urllib.parse import unquote

from uns_server.cli import heartbeats as heartbeat_commands
from uns_server.cli import keys as key_commands
from uns_server.cli import people as people_commands
from uns_server.cli import policies as policy_commands
from uns_server.cli import remote
from uns_server.cli import windows as window_commands
from uns_server.cli.admin_parser import PROG, build_parser
from uns_server.cli.errors import UsageError, describe, quiet_when_the_reader_leaves
from uns_server.cli.keys import when
from uns_server.domain import retention as retention_rules
from uns_server.domain.enums import Role
from uns_server.domain.errors import InvalidRequest, NotFound, RecipientInUse
from uns_server.domain.links import LinkSigner, token_hash
from uns_server.domain.oncall import OnCall
from uns_server.domain.people import Recipient, Rotation
from uns_server.domain.policy import PolicyRevision
from uns_server.services.keys import KeyInfo, KeyService
from uns_server.services.people import PeopleService
from uns_server.services.policies import PolicyInput, PolicyService
from uns_server.services.retention import Report, RetentionService
from uns_server.store import migrate
from uns_server.store.connect import describe_url
from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
# Policy types ``policies list`` reads without a TYPE (far beyond any real count).
TYPES_MAX = 100_000


class Failure(Exception):
    """The command could not be carried out: exit 1."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"uns-admin:{user}"


# --- commands -----------------------------------------------------------------------


async def cmd_migrate(db: Database, args: argparse.Namespace) -> None:
    await migrate.upgrade(db)
    print(await migrate.current_revision(db))


class DatabaseKeys:
    """``cli.keys.Keys`` on the database: ``KeyService`` once the schema is at head."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._service = KeyService(SqlStore(db), utcnow)

    async def create(
        self,
        principal: str,
        roles: Iterable[Role],
        description: str,
        responds_for: Iterable[str] = (),
    ) -> tuple[str, KeyInfo]:
        await _require_schema(self._db)
        return await self._service.create(principal, roles, description, responds_for)

    async def list_all(self) -> list[KeyInfo]:
        await _require_schema(self._db)
        return await self._service.list_all()

    async def revoke(self, key: str) -> KeyInfo:
        await _require_schema(self._db)
        return await self._service.revoke(key)


def _keys(command: key_commands.Command) -> Command:
    async def run(db: Database, args: argparse.Namespace) -> None:
        await command(DatabaseKeys(db), args)

    return run


async def cmd_links_revoke(db: Database, args: argparse.Namespace) -> None:
    keys = [k.strip() for k in args.action_link_keys.split(",") if k.strip()]
    if not keys:
        raise UsageError("give the server's --action-link-keys (or UNS_ACTION_LINK_KEYS)")
    token = unquote(args.link.strip().rstrip("/").rpartition("/")[2])
    # Any genuine link: past its own expiry a snooze may keep it alive (links.outlives).
    claims = LinkSigner(keys).read(token)
    if claims is None:
        raise Failure("not a valid link of these keys: nothing to revoke")
    await _require_schema(db)
    async with SqlStore(db).write() as tx:
        await tx.action_links.revoke(
            token_hash(token), claims.notification_id, actor=PROG, now=utcnow()
        )
    print(
        f"revoked the {'/'.join(claims.actions)} link of notification "
        f"{claims.notification_id} for {claims.recipient}",
        file=sys.stderr,
    )


class DatabasePolicies:
    """``cli.policies.PolicyBackend`` on the database: ``PolicyService`` once the schema is at
    head; revisions written by this operating-system user (``_actor``)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._service = PolicyService(SqlStore(db), utcnow)

    async def put_many(
        self, items: Sequence[PolicyInput], *, activate: bool
    ) -> list[PolicyRevision]:
        await _require_schema(self._db)
        return await self._service.put_many(_actor(), items, activate=activate)

    async def activate(self, notification_type: str, revision: int) -> PolicyRevision:
        await _require_schema(self._db)
        return await self._service.activate(notification_type, revision)

    async def get(self, notification_type: str, revision: int) -> PolicyRevision:
        await _require_schema(self._db)
        return await self._service.get(notification_type, revision)

    async def list_all(self, notification_type: str) -> list[PolicyRevision]:
        await _require_schema(self._db)
        revisions: list[PolicyRevision] = []
        token = ""
        while True:
            page, token = await self._service.list(
                notification_type, policy_commands.PAGE_SIZE, token
            )
            revisions += page
            if not token:
                return revisions

    async def types(self) -> list[str]:
        await _require_schema(self._db)
        async with SqlStore(self._db).read() as tx:
            found = await tx.console.policy_types(TYPES_MAX)
        return [t.notification_type for t in found]


def _policies(command: policy_commands.Command) -> Command:
    async def run(db: Database, args: argparse.Namespace) -> None:
        await command(DatabasePolicies(db), args)

    return run


class DatabasePeople:
    """``cli.people.PeopleBackend`` on the database: ``PeopleService`` once the schema is at
    head, written by this operating-system user (``_actor``). Contacts' channels are
    not checked (no server configuration here), as for policies."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._service = PeopleService(SqlStore(db), utcnow)

    async def put_recipient(self, recipient: Recipient) -> Recipient:
        await _require_schema(self._db)
        return await self._service.put_recipient(_actor(), recipient)

    async def get_recipient(self, recipient_id: str) -> Recipient:
        await _require_schema(self._db)
        return await self._service.get_recipient(recipient_id)

    async def list_recipients(self) -> list[Recipient]:
        await _require_schema(self._db)
        out: list[Recipient] = []
        token = ""
        while True:
            page, token = await self._service.list_recipients(people_commands.PAGE_SIZE, token)
            out += page
            if not token:
                return out

    async def delete_recipient(self, recipient_id: str) -> Recipient:
        await _require_schema(self._db)
        return await self._service.delete_recipient(_actor(), recipient_id)

    async def put_rotation(self, rotation: Rotation) -> Rotation:
        await _require_schema(self._db)
        return await self._service.put_rotation(_actor(), rotation)

    async def get_rotation(self, rotation_id: str) -> Rotation:
        await _require_schema(self._db)
        return await self._service.get_rotation(rotation_id)

    async def list_rotations(self) -> list[Rotation]:
        await _require_schema(self._db)
        out: list[Rotation] = []
        token = ""
        while True:
            page, token = await self._service.list_rotations(people_commands.PAGE_SIZE, token)
            out += page
            if not token:
                return out

    async def delete_rotation(self, rotation_id: str) -> Rotation:
        await _require_schema(self._db)
        return await self._service.delete_rotation(_actor(), rotation_id)

    async def on_call(self, rotation_id: str, at: datetime | None) -> tuple[datetime, OnCall]:
        await _require_schema(self._db)
        _rotation, when, answer = await self._service.on_call(rotation_id, at)
        return when, answer


def _people(command: people_commands.Command) -> Command:
    async def run(db: Database, args: argparse.Namespace) -> None:
        await command(DatabasePeople(db), args)

    return run


def _heartbeats(command: heartbeat_commands.Command) -> Command:
    async def run(db: Database, args: argparse.Namespace) -> None:
        await _require_schema(db)
        await command(heartbeat_commands.DatabaseHeartbeats(db, _actor()), args)

    return run


def _windows(command: window_commands.Command) -> Command:
    async def run(db: Database, args: argparse.Namespace) -> None:
        ready = functools.partial(_require_schema, db)
        await command(window_commands.DatabaseWindows.on(SqlStore(db), _actor(), ready), args)

    return run


async def cmd_maintain(db: Database, args: argparse.Namespace) -> None:
    policy = retention_rules.RetentionPolicy(
        terminal_days=args.terminal_days,
        events_days=args.events_days,
        dedup_days=args.dedup_days,
        idempotency_seconds=args.idempotency_seconds,
    )
    retention = RetentionService(SqlStore(db), policy, operator=_actor(), limit=args.limit)
    await _require_schema(db)
    report = await retention.run_once(apply=args.apply, now=utcnow())
    if args.json:
        _print_json(report.to_json())
    else:
        _print_report(report)


def _print_report(report: Report) -> None:
    rows = report.deleted_rows
    verb = "deleted" if report.applied else "would delete"
    print(
        f"{'applied' if report.applied else 'dry run (nothing changed; --apply to act)'}: "
        f"{verb} {rows['uns_notifications']} notifications, {rows['uns_events']} events, "
        f"{rows['uns_dedup']} dedup windows; "
        f"{'expired' if report.applied else 'would expire'} "
        f"{report.idempotency_keys_expired} idempotency keys"
    )
    cut = report.cutoffs
    print(
        f"cutoffs: terminal {when(cut.terminal)}, events {when(cut.events)}, "
        f"dedup {when(cut.dedup)}, idempotency {when(cut.idempotency)}"
    )
    print(f"history horizon: sequence {report.compacted_sequence}")
    if report.kept_for_dedup_groups:
        print(f"kept {report.kept_for_dedup_groups} settled notifications linked to live work")
    for nid in report.notification_ids:
        print(f"notification {nid}")
    for key in report.dedup_keys:
        print(f"dedup window {key}")
    if report.truncated:
        print("more settled notifications than --limit: run again")
    if report.receipt_id:
        print(f"receipt: RETENTION_APPLIED {report.receipt_id}")


async def _require_schema(db: Database) -> None:
    if not await migrate.is_migrated(db):
        raise Failure("the database schema is not at head; run `uns-admin migrate` first")


Command = Callable[[Database, argparse.Namespace], Awaitable[None]]

COMMANDS: dict[tuple[str, str | None], Command] = {
    ("migrate", None): cmd_migrate,
    **{("keys", name): _keys(command) for name, command in key_commands.COMMANDS.items()},
    **{("policies", name): _policies(c) for name, c in policy_commands.COMMANDS.items()},
    **{key: _people(c) for key, c in people_commands.COMMANDS.items()},
    **{("heartbeats", name): _heartbeats(c) for name, c in heartbeat_commands.COMMANDS.items()},
    **{("windows", name): _windows(c) for name, c in window_commands.COMMANDS.items()},
    ("maintain", None): cmd_maintain,
    ("links", "revoke"): cmd_links_revoke,
}


def _check_database(args: argparse.Namespace) -> None:
    """Say which database this command uses; refuse a SQLite file that is not there
    (only ``migrate`` creates a database)."""
    try:
        shown, sqlite_file = describe_url(args.database_url)
    except Exception as exc:  # unparsable URL
        raise UsageError(f"--database-url: {exc}") from None
    # Which database, always (stderr: stdout stays the command's output). A command run
    # from the wrong directory must not quietly work on an empty ./uns.db it created.
    print(f"{PROG}: database {shown}", file=sys.stderr)
    if sqlite_file is not None and args.command != "migrate" and not os.path.exists(sqlite_file):
        raise Failure(
            f"no database at {sqlite_file}: give the server's --database-url "
            "(or UNS_DATABASE_URL), or create this one with `uns-admin migrate`"
        )


async def run(args: argparse.Namespace) -> None:
    sub = getattr(args, f"{args.command}_command", None)
    command = COMMANDS[(args.command, sub)]
    try:
        db = Database(args.database_url)
    except Exception as exc:  # unknown dialect
        raise UsageError(f"--database-url: {exc}") from None
    try:
        await command(db, args)
    finally:
        await db.dispose()


def _fail(code: int, message: str) -> NoReturn:
    print(f"{PROG}: {message}", file=sys.stderr)
    raise SystemExit(code)


def main(argv: list[str] | None = None) -> None:
    quiet_when_the_reader_leaves(lambda: _main(argv))


def _main(argv: list[str] | None) -> None:
    args = build_parser().parse_args(argv)
    if args.command in remote.COMMANDS:
        raise SystemExit(remote.main(args))
    try:
        if args.command == "policies" and args.policies_command == "put":
            args.policy_inputs = policy_commands.load_policy_file(args.file)
        if remote.wants_remote(args):  # keys, policies with --target: over gRPC
            raise SystemExit(remote.main(args))
        _check_database(args)
        asyncio.run(run(args))
    except UsageError as exc:
        _fail(EXIT_USAGE, str(exc))
    except InvalidRequest as exc:
        _fail(EXIT_USAGE, describe(exc))
    except (Failure, NotFound, RecipientInUse) as exc:
        _fail(EXIT_FAILURE, str(exc))
    except KeyboardInterrupt:
        _fail(130, "interrupted")
    except BrokenPipeError:
        raise  # the reader left: quiet_when_the_reader_leaves
    except Exception as exc:  # database down, permissions, ...: one line, no traceback
        message = " ".join(f"{type(exc).__name__}: {exc}".split())
        _fail(EXIT_FAILURE, message[:500])
    raise SystemExit(EXIT_OK)


if __name__ == "__main__":
    main()

"""``uns-admin windows put|get|list|delete``: maintenance windows (SPEC §7 "Quiet on
purpose"), one implementation for both modes.

The commands call a ``WindowBackend`` and print JSON, the same on the database
(``services.maintenance.MaintenanceService``, ``DatabaseWindows``) and over
``uns.v1.MaintenanceService`` (``cli.remote.windows.RemoteWindows``, with
``--target``). ``put`` takes the window from flags, or from a YAML/JSON file of one
window or a list (put in order), in the format ``get`` and ``list`` print (their
read-only ``update_time`` and ``updated_by`` are ignored)::

    uns-admin windows put --id db-upgrade --start 2026-03-23T22:00:00+01:00 \\
        --end 2026-03-24T02:00:00+01:00 --type 'db.*' --type backup.failed \\
        --reason "PostgreSQL 17 upgrade"

    # windows.yaml
    window_id: db-upgrade
    start_time: 2026-03-23T22:00:00+01:00
    end_time: 2026-03-24T02:00:00+01:00
    notification_types: ["db.*", backup.failed]
    reason: PostgreSQL 17 upgrade

Both modes validate the window as the server does (``domain.maintenance.build_window``)
before anything is written: a bad window exits 2 naming its ``window.<field>``.
``delete`` ends a window at once: what it held is due now.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from uns_server.cli import people as people_commands
from uns_server.cli.errors import UsageError, describe
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.maintenance import MaintenanceWindow, build_window
from uns_server.services.maintenance import MaintenanceService
from uns_server.store.sql_store import SqlStore

PAGE_SIZE = 1000
_FIELDS = ("window_id", "start_time", "end_time", "notification_types", "reason")
_READ_ONLY = ("update_time", "updated_by")


class WindowBackend(Protocol):
    """Where the windows are: the database, or a server."""

    async def put(self, window: MaintenanceWindow) -> MaintenanceWindow: ...

    async def get(self, window_id: str) -> MaintenanceWindow: ...

    async def list_all(self) -> list[MaintenanceWindow]: ...

    async def delete(self, window_id: str) -> MaintenanceWindow: ...


@dataclass
class DatabaseWindows:
    """``WindowBackend`` on the database: ``MaintenanceService`` (without windows in memory:
    the servers reload theirs on its signal, or within ``REFRESH_SECONDS``), once
    ``ready`` (the schema is at head); changes recorded as ``actor``."""

    service: MaintenanceService
    actor: str
    ready: Callable[[], Awaitable[None]]

    @classmethod
    def on(
        cls, store: SqlStore, actor: str, ready: Callable[[], Awaitable[None]]
    ) -> DatabaseWindows:
        return cls(MaintenanceService(store, lambda: datetime.now(UTC)), actor, ready)

    async def put(self, window: MaintenanceWindow) -> MaintenanceWindow:
        await self.ready()
        return await self.service.put(self.actor, window)

    async def get(self, window_id: str) -> MaintenanceWindow:
        await self.ready()
        return await self.service.get(window_id)

    async def list_all(self) -> list[MaintenanceWindow]:
        await self.ready()
        out: list[MaintenanceWindow] = []
        token = ""
        while True:
            page, token = await self.service.list(PAGE_SIZE, token)
            out += page
            if not token:
                return out

    async def delete(self, window_id: str) -> MaintenanceWindow:
        await self.ready()
        return await self.service.delete(self.actor, window_id)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def window_to_json(w: MaintenanceWindow) -> dict[str, Any]:
    return {
        "window_id": w.window_id,
        "start_time": _iso(w.start_time),
        "end_time": _iso(w.end_time),
        "notification_types": list(w.notification_types),
        "reason": w.reason,
        "update_time": _iso(w.updated_at),
        "updated_by": w.updated_by,
    }


def _time(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):  # YAML reads an unquoted timestamp as one
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            raise InvalidRequest.of_field(field, "must be an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise InvalidRequest.of_field(field, "must carry an offset (Z or +01:00)")
    return parsed.astimezone(UTC)


def window_from_document(item: Mapping[str, Any]) -> MaintenanceWindow:
    unknown = sorted(set(item) - set(_FIELDS) - set(_READ_ONLY))
    if unknown:
        raise InvalidRequest.of_field(
            f"window.{unknown[0]}", f"unknown field; a window has {', '.join(_FIELDS)}"
        )
    types = item.get("notification_types") or []
    if not isinstance(types, list):
        raise InvalidRequest.of_field("window.notification_types", "must be a list")
    return build_window(
        str(item.get("window_id") or ""),
        _time(item.get("start_time"), "window.start_time"),
        _time(item.get("end_time"), "window.end_time"),
        [str(t) for t in types],
        str(item.get("reason") or ""),
    )


def _from_flags(args: argparse.Namespace) -> list[MaintenanceWindow]:
    if args.file is not None:
        if any(v is not None for v in (args.id, args.start, args.end, args.type, args.reason)):
            raise UsageError("give --file or the window's flags (--id, --start, ...), not both")
        return people_commands.load(args.file, window_from_document)
    if args.id is None:
        raise UsageError("give --id, --start, --end and --type (or --file)")
    try:
        return [
            build_window(
                args.id,
                _time(args.start, "--start"),
                _time(args.end, "--end"),
                args.type or [],
                args.reason or "",
            )
        ]
    except InvalidRequest as exc:
        raise UsageError(describe(exc)) from None


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


async def cmd_put(windows: WindowBackend, args: argparse.Namespace) -> None:
    items = _from_flags(args)  # every window validated before any is written
    _print_json([window_to_json(await windows.put(w)) for w in items])


async def cmd_get(windows: WindowBackend, args: argparse.Namespace) -> None:
    _print_json(window_to_json(await windows.get(args.id)))


async def cmd_list(windows: WindowBackend, args: argparse.Namespace) -> None:
    _print_json([window_to_json(w) for w in await windows.list_all()])


async def cmd_delete(windows: WindowBackend, args: argparse.Namespace) -> None:
    _print_json(window_to_json(await windows.delete(args.id)))


Command = Callable[[WindowBackend, argparse.Namespace], Awaitable[None]]

COMMANDS: dict[str, Command] = {
    "put": cmd_put,
    "get": cmd_get,
    "list": cmd_list,
    "delete": cmd_delete,
}


def add_parsers(commands: Any, connection: argparse.ArgumentParser) -> None:
    """``windows`` on ``uns-admin``'s parser."""
    sub = commands.add_parser(
        "windows",
        help="maintenance windows: planned quiet for some notification types",
        description="A notification of a window's types accepted, or falling due, while "
        "the window is open stays PENDING until it ends (SAFETY intent is never held). "
        "Deleting a window releases what it held at once.",
    ).add_subparsers(dest="windows_command", required=True, metavar="COMMAND")
    put = sub.add_parser(
        "put",
        parents=[connection],
        help="create or replace a window, from flags or a YAML/JSON file",
    )
    put.add_argument("--id", help="the window_id (1-64 of a-z, 0-9, '.', '_', '-')")
    put.add_argument("--start", metavar="TIME", help="when it opens: ISO 8601 with offset")
    put.add_argument("--end", metavar="TIME", help="when it ends: ISO 8601 with offset")
    put.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        help="a notification type held, or a prefix ending in '*' ('db.*'); repeatable",
    )
    put.add_argument("--reason", help="why: shown on the HELD events and in the console")
    put.add_argument(
        "--file", type=Path, help="YAML or JSON file of a window or a list ('-': stdin)"
    )
    sub.add_parser("list", parents=[connection], help="list the windows, ended ones too")
    for verb, what in (("get", "show one"), ("delete", "end one now and remove it")):
        sub.add_parser(verb, parents=[connection], help=what).add_argument("id", metavar="ID")

"""``uns-admin heartbeats put|list|show|delete``: one implementation for both modes.

The commands build heartbeats from a YAML (or JSON) file or from flags, call a
``HeartbeatBackend`` and print each as ``uns.v1.HeartbeatMonitor`` in protobuf's JSON with
the proto field names, the same on the database (``DatabaseHeartbeats``: the
``services.heartbeats.HeartbeatService`` the server runs) and over
``uns.v1.HeartbeatService`` (``cli.remote.heartbeats.RemoteHeartbeats``, with
``--target``). A file holds one object or a list, put one at a time, in order::

    # heartbeats.yaml
    - heartbeat_id: nightly-backup
      notification_type: ops.backup
      interval: 1d          # 7d, 12h, 30m, 1d12h, or a number of seconds
      grace: 30m
      title: The nightly backup did not run
      message: No beat from backup.sh on db-1 within a day and half an hour.

or ``uns-admin heartbeats put nightly-backup --type ops.backup --interval 1d --grace 30m
--title "..." --message "..."``. The output fields ``state``, ``last_beat_time``,
``deadline_time``, ``notification_id``, ``page_error``, ``create_time``,
``update_time`` and ``updated_by`` are read-only (a printed object can be put back).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from google.protobuf import json_format

from uns.v1 import heartbeat_service_pb2 as pb
from uns_server.api.heartbeat_servicer import heartbeat_to_wire
from uns_server.cli.errors import UsageError
from uns_server.cli.people import load, parse_shift
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.heartbeats import Heartbeat, build_heartbeat
from uns_server.services.heartbeats import HeartbeatService
from uns_server.store.db import Database
from uns_server.store.sql_store import SqlStore

PAGE_SIZE = 1000
_FIELDS = ("heartbeat_id", "notification_type", "interval", "grace", "title", "message")
_READ_ONLY = (
    "state",
    "last_beat_time",
    "deadline_time",
    "notification_id",
    "page_error",
    "create_time",
    "update_time",
    "updated_by",
)


class HeartbeatBackend(Protocol):
    """Where the heartbeats are: the database, or a server."""

    async def put(self, heartbeat: Heartbeat) -> pb.HeartbeatMonitor: ...

    async def get(self, heartbeat_id: str) -> pb.HeartbeatMonitor: ...

    async def list_all(self) -> list[pb.HeartbeatMonitor]: ...

    async def delete(self, heartbeat_id: str) -> pb.HeartbeatMonitor: ...


def heartbeat_to_json(h: pb.HeartbeatMonitor) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(h, preserving_proto_field_name=True)
    return out


def heartbeat_from_document(item: Mapping[str, Any]) -> Heartbeat:
    unknown = sorted(set(item) - set(_FIELDS) - set(_READ_ONLY))
    if unknown:
        raise InvalidRequest.of_field(
            f"heartbeat.{unknown[0]}", f"unknown field; a heartbeat has {', '.join(_FIELDS)}"
        )

    def text(key: str) -> str:
        value = item.get(key)
        return "" if value is None else str(value)

    return build_heartbeat(
        text("heartbeat_id"),
        text("notification_type"),
        parse_shift(_seconds(item.get("interval")), "heartbeat.interval"),
        parse_shift(_seconds(item.get("grace")), "heartbeat.grace"),
        text("title"),
        text("message"),
    )


def _seconds(value: Any) -> Any:
    """``3600s`` as printed (protobuf's JSON of a Duration) reads back as 3600."""
    if isinstance(value, str) and value.endswith("s") and value[:-1].isdigit():
        return int(value[:-1])
    return value


def _from_flags(args: argparse.Namespace) -> list[Heartbeat]:
    if args.heartbeat_id is None:
        raise UsageError("heartbeats put: give --file, or an ID with --type, --interval ...")
    item = {
        "heartbeat_id": args.heartbeat_id,
        "notification_type": args.type,
        "interval": args.interval,
        "grace": args.grace,
        "title": args.title,
        "message": args.message,
    }
    try:
        return [heartbeat_from_document(item)]
    except InvalidRequest as exc:
        raise UsageError(f"heartbeats put: {exc.message}") from None


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


async def cmd_put(heartbeats: HeartbeatBackend, args: argparse.Namespace) -> None:
    if args.file is not None and args.heartbeat_id is not None:
        raise UsageError("heartbeats put: give --file or an ID with flags, not both")
    items = load(args.file, heartbeat_from_document) if args.file else _from_flags(args)
    _print_json([heartbeat_to_json(await heartbeats.put(h)) for h in items])


async def cmd_list(heartbeats: HeartbeatBackend, args: argparse.Namespace) -> None:
    _print_json([heartbeat_to_json(h) for h in await heartbeats.list_all()])


async def cmd_show(heartbeats: HeartbeatBackend, args: argparse.Namespace) -> None:
    _print_json(heartbeat_to_json(await heartbeats.get(args.id)))


async def cmd_delete(heartbeats: HeartbeatBackend, args: argparse.Namespace) -> None:
    _print_json(heartbeat_to_json(await heartbeats.delete(args.id)))


Command = Callable[[HeartbeatBackend, argparse.Namespace], Awaitable[None]]

COMMANDS: dict[str, Command] = {
    "put": cmd_put,
    "list": cmd_list,
    "show": cmd_show,
    "get": cmd_show,
    "delete": cmd_delete,
}


class DatabaseHeartbeats:
    """``HeartbeatBackend`` on the database (its schema at head: ``cli.admin`` checks), written
    by ``actor`` (``uns-admin:<user>``). A put arms the deadline the server's worker
    pages from; pages and their withdrawals are the server's (beats come to it)."""

    def __init__(self, db: Database, actor: str) -> None:
        self._actor = actor
        self._service = HeartbeatService(SqlStore(db), _now)

    async def put(self, heartbeat: Heartbeat) -> pb.HeartbeatMonitor:
        return heartbeat_to_wire(await self._service.put(self._actor, heartbeat), _now())

    async def get(self, heartbeat_id: str) -> pb.HeartbeatMonitor:
        return heartbeat_to_wire(await self._service.get(heartbeat_id), _now())

    async def list_all(self) -> list[pb.HeartbeatMonitor]:
        out: list[pb.HeartbeatMonitor] = []
        token = ""
        while True:
            page, token = await self._service.list(PAGE_SIZE, token)
            out += [heartbeat_to_wire(h, _now()) for h in page]
            if not token:
                return out

    async def delete(self, heartbeat_id: str) -> pb.HeartbeatMonitor:
        return heartbeat_to_wire(await self._service.delete(self._actor, heartbeat_id), _now())


def _now() -> datetime:
    return datetime.now(UTC)


def add_parsers(commands: Any, connection: argparse.ArgumentParser) -> None:
    """``heartbeats`` on ``uns-admin``'s parser."""
    sub = commands.add_parser(
        "heartbeats", help="heartbeats: jobs that must report in (a page when they go silent)"
    ).add_subparsers(dest="heartbeats_command", required=True, metavar="COMMAND")
    put = sub.add_parser(
        "put",
        parents=[connection],
        help="create or replace heartbeats from a YAML/JSON file, or one from flags",
    )
    put.add_argument("heartbeat_id", metavar="ID", nargs="?", help="with the flags below")
    put.add_argument("--file", type=Path, help="YAML or JSON file ('-': stdin)")
    put.add_argument("--type", help="the notification type of the page")
    put.add_argument("--interval", help="how often the job beats: 1d, 12h, 30m or seconds")
    put.add_argument("--grace", help="how much later a beat may come (default 0)")
    put.add_argument("--title", help="the page's title")
    put.add_argument("--message", help="the page's message")
    sub.add_parser("list", parents=[connection], help="list heartbeats and their states")
    for verb in ("show", "get", "delete"):
        sub.add_parser(verb, parents=[connection], help=f"{verb} one").add_argument(
            "id", metavar="ID"
        )

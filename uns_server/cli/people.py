"""``uns-admin recipients|rotations put|list|show|delete`` and ``uns-admin oncall``: one
implementation for both modes.

The commands read YAML (or JSON) files, call a ``PeopleBackend`` and print JSON, the same on
the database (``services.people.PeopleService``, ``cli.admin``) and over
``uns.v1.RecipientService`` (``cli.remote.people.RemotePeople``, with ``--target``).
A file holds one object or a list; a list is put one object at a time, in order (so a
file can hold the people and then the rotation that names them). What ``show`` and
``list`` print is the same format (plus the read-only ``create_time``, ``update_time``
and ``updated_by``), so a printed object can be edited and put back; any other field is
refused, so a misspelled one is not silently dropped (docs/deployment.md, "People and
rotations with uns-admin")::

    # people.yaml
    - recipient_id: alice
      display_name: Alice Martin
      time_zone: Europe/Paris
      locale: fr-FR        # optional, BCP 47: picks the policy's templates
      contacts: [{channel: email, address: alice@example.com},
                 {channel: sms, address: "+33612345678"}]
      quiet_hours: {time_zone: Europe/Paris, start: "22:00", end: "07:00"}
      notification_rules:  # optional: which contact when (none: all at once)
        - {contact: email, after: 0s, urgency: high}
        - {contact: sms, after: 2m, urgency: high}
        - {contact: email, after: 0s, urgency: low}

    # rotation.yaml
    rotation_id: primary
    members: [alice, bob]
    start_time: 2026-03-23T09:00:00+01:00
    shift: 7d              # 7d, 12h, 30m, 1d12h, or a number of seconds
    time_zone: Europe/Paris
    overrides:
      - {recipient_id: carol, start_time: 2026-04-01T09:00:00+02:00,
         end_time: 2026-04-02T09:00:00+02:00}
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import yaml

from uns_server.cli.errors import UsageError, describe
from uns_server.domain.enums import Urgency
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.oncall import OnCall
from uns_server.domain.people import Recipient, Rotation, build_recipient, build_rotation
from uns_server.domain.staged_rules import NotificationRule

PAGE_SIZE = 1000
_SHIFT = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# The fields of each document; show/list also print these read-only ones.
_READ_ONLY = ("create_time", "update_time", "updated_by")
_RECIPIENT_FIELDS = (
    "recipient_id",
    "display_name",
    "time_zone",
    "locale",
    "contacts",
    "quiet_hours",
    "notification_rules",
)
_ROTATION_FIELDS = ("rotation_id", "members", "start_time", "shift", "time_zone", "overrides")


class PeopleBackend(Protocol):
    """Where the people are: the database, or a server."""

    async def put_recipient(self, recipient: Recipient) -> Recipient: ...

    async def get_recipient(self, recipient_id: str) -> Recipient: ...

    async def list_recipients(self) -> list[Recipient]: ...

    async def delete_recipient(self, recipient_id: str) -> Recipient: ...

    async def put_rotation(self, rotation: Rotation) -> Rotation: ...

    async def get_rotation(self, rotation_id: str) -> Rotation: ...

    async def list_rotations(self) -> list[Rotation]: ...

    async def delete_rotation(self, rotation_id: str) -> Rotation: ...

    async def on_call(self, rotation_id: str, at: datetime | None) -> tuple[datetime, OnCall]: ...


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def recipient_to_json(r: Recipient) -> dict[str, Any]:
    return {
        "recipient_id": r.recipient_id,
        "display_name": r.display_name,
        "time_zone": r.time_zone,
        **({"locale": r.locale} if r.locale else {}),
        "contacts": r.contacts_json(),
        "quiet_hours": r.quiet_hours.to_json() if r.quiet_hours else None,
        **(
            {"notification_rules": [_rule_to_json(x) for x in r.notification_rules]}
            if r.notification_rules
            else {}
        ),
        "create_time": _iso(r.created_at),
        "update_time": _iso(r.updated_at),
        "updated_by": r.updated_by,
    }


def _rule_to_json(rule: NotificationRule) -> dict[str, Any]:
    return {
        "contact": rule.contact,
        "after": format_shift(rule.after),
        "urgency": rule.urgency.value.lower(),
    }


def _urgency(value: Any) -> Urgency | None:
    """``high``/``low`` (any case, ``URGENCY_`` prefix allowed); None: the builder
    says it is missing or wrong."""
    text = str(value or "").upper().removeprefix("URGENCY_")
    return Urgency(text) if text in Urgency.__members__ else None


def rotation_to_json(r: Rotation) -> dict[str, Any]:
    return {
        "rotation_id": r.rotation_id,
        "members": list(r.members),
        "start_time": _iso(r.start),
        "shift": format_shift(r.shift),
        "time_zone": r.time_zone,
        "overrides": [
            {"recipient_id": o.recipient_id, "start_time": _iso(o.start), "end_time": _iso(o.end)}
            for o in r.overrides
        ],
        "create_time": _iso(r.created_at),
        "update_time": _iso(r.updated_at),
        "updated_by": r.updated_by,
    }


def _read(path: Path) -> list[Mapping[str, Any]]:
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        document = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML or JSON: {' '.join(str(exc).split())}") from None
    items = document if isinstance(document, list) else [document]
    if not items or not all(isinstance(i, dict) for i in items):
        raise UsageError(f"{path}: expected an object or a list of objects")
    return items


def _time(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value))
        except ValueError:
            raise InvalidRequest.of_field(field, "must be an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise InvalidRequest.of_field(field, "must carry an offset (Z or +01:00)")
    return parsed.astimezone(UTC)


def parse_shift(value: Any, field: str = "shift") -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return timedelta(seconds=value)
    match = _SHIFT.fullmatch(str(value).strip())
    if not match or not any(match.groups()):
        raise InvalidRequest.of_field(field, "must be like 7d, 12h, 30m, 1d12h or seconds")
    d, h, m, s = (int(g or 0) for g in match.groups())
    return timedelta(days=d, hours=h, minutes=m, seconds=s)


def format_shift(shift: timedelta) -> str:
    """``shift`` as ``parse_shift`` reads it: ``7d``, ``12h``, ``1d12h30m``."""
    rest = int(shift.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _known(item: Mapping[str, Any], allowed: Sequence[str], what: str) -> None:
    unknown = sorted(set(item) - set(allowed) - set(_READ_ONLY))
    if unknown:
        raise InvalidRequest.of_field(
            f"{what}.{unknown[0]}", f"unknown field; a {what} has {', '.join(allowed)}"
        )


def _objects(value: Any, field: str) -> list[Mapping[str, Any]]:
    items = value or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InvalidRequest.of_field(field, "must be a list of objects")
    return items


def _text(item: Mapping[str, Any], key: str) -> str:
    value = item.get(key)
    return "" if value is None else str(value)


def recipient_from_document(item: Mapping[str, Any]) -> Recipient:
    _known(item, _RECIPIENT_FIELDS, "recipient")
    quiet = item.get("quiet_hours")
    contacts = _objects(item.get("contacts"), "recipient.contacts")
    return build_recipient(
        _text(item, "recipient_id"),
        _text(item, "display_name"),
        _text(item, "time_zone"),
        [(_text(c, "channel"), _text(c, "address")) for c in contacts],
        (
            (_text(quiet, "time_zone"), _text(quiet, "start"), _text(quiet, "end"))
            if isinstance(quiet, dict)
            else None
        ),
        locale=_text(item, "locale"),
        rules=[
            (
                _text(rule, "contact"),
                parse_shift(rule.get("after"), f"recipient.notification_rules[{i}].after"),
                _urgency(rule.get("urgency")),
            )
            for i, rule in enumerate(
                _objects(item.get("notification_rules"), "recipient.notification_rules")
            )
        ],
    )


def rotation_from_document(item: Mapping[str, Any]) -> Rotation:
    _known(item, _ROTATION_FIELDS, "rotation")
    return build_rotation(
        _text(item, "rotation_id"),
        [str(m) for m in item.get("members") or []],
        _time(item.get("start_time"), "rotation.start_time"),
        parse_shift(item.get("shift"), "rotation.shift"),
        _text(item, "time_zone"),
        [
            (
                _text(o, "recipient_id"),
                _time(o.get("start_time"), f"rotation.overrides[{i}].start_time"),
                _time(o.get("end_time"), f"rotation.overrides[{i}].end_time"),
            )
            for i, o in enumerate(_objects(item.get("overrides"), "rotation.overrides"))
        ],
    )


def load(path: Path, build: Callable[[Mapping[str, Any]], Any]) -> list[Any]:
    """Read and validate every object of a file before writing any."""
    out = []
    for i, item in enumerate(_read(path)):
        try:
            out.append(build(item))
        except InvalidRequest as exc:
            raise UsageError(f"{path}: item {i}: {describe(exc)}") from None
    return out


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


async def cmd_recipients_put(people: PeopleBackend, args: argparse.Namespace) -> None:
    items = load(args.file, recipient_from_document)
    _print_json([recipient_to_json(await people.put_recipient(r)) for r in items])


async def cmd_recipients_list(people: PeopleBackend, args: argparse.Namespace) -> None:
    _print_json([recipient_to_json(r) for r in await people.list_recipients()])


async def cmd_recipients_show(people: PeopleBackend, args: argparse.Namespace) -> None:
    _print_json(recipient_to_json(await people.get_recipient(args.id)))


async def cmd_recipients_delete(people: PeopleBackend, args: argparse.Namespace) -> None:
    _print_json(recipient_to_json(await people.delete_recipient(args.id)))


async def cmd_rotations_put(people: PeopleBackend, args: argparse.Namespace) -> None:
    items = load(args.file, rotation_from_document)
    _print_json([rotation_to_json(await people.put_rotation(r)) for r in items])


async def cmd_rotations_list(people: PeopleBackend, args: argparse.Namespace) -> None:
    _print_json([rotation_to_json(r) for r in await people.list_rotations()])


async def cmd_rotations_show(people: PeopleBackend, args: argparse.Namespace) -> None:
    _print_json(rotation_to_json(await people.get_rotation(args.id)))


async def cmd_rotations_delete(people: PeopleBackend, args: argparse.Namespace) -> None:
    _print_json(rotation_to_json(await people.delete_rotation(args.id)))


async def cmd_oncall(people: PeopleBackend, args: argparse.Namespace) -> None:
    at = _time(args.at, "--at") if args.at else None
    when, answer = await people.on_call(args.rotation, at)
    _print_json(
        {
            "rotation_id": args.rotation,
            "time": _iso(when),
            "recipient_id": answer.recipient_id,
            "shift_end_time": _iso(answer.until),
            "override": answer.override,
            "next_recipient_id": answer.next_recipient_id,
        }
    )


Command = Callable[[PeopleBackend, argparse.Namespace], Awaitable[None]]

COMMANDS: dict[tuple[str, str | None], Command] = {
    ("recipients", "put"): cmd_recipients_put,
    ("recipients", "list"): cmd_recipients_list,
    ("recipients", "show"): cmd_recipients_show,
    ("recipients", "delete"): cmd_recipients_delete,
    ("rotations", "put"): cmd_rotations_put,
    ("rotations", "list"): cmd_rotations_list,
    ("rotations", "show"): cmd_rotations_show,
    ("rotations", "delete"): cmd_rotations_delete,
    ("oncall", None): cmd_oncall,
}


def add_parsers(commands: Any, connection: argparse.ArgumentParser) -> None:
    """``recipients``, ``rotations`` and ``oncall`` on ``uns-admin``'s parser."""
    for noun, what in (("recipients", "people"), ("rotations", "on-call rotations")):
        sub = commands.add_parser(noun, help=what).add_subparsers(
            dest=f"{noun}_command", required=True, metavar="COMMAND"
        )
        put = sub.add_parser(
            "put", parents=[connection], help=f"create or replace {what} from a YAML/JSON file"
        )
        put.add_argument("--file", required=True, type=Path, help="YAML or JSON file ('-': stdin)")
        sub.add_parser("list", parents=[connection], help=f"list {what}")
        for verb in ("show", "delete"):
            sub.add_parser(verb, parents=[connection], help=f"{verb} one").add_argument(
                "id", metavar="ID"
            )
    oncall = commands.add_parser(
        "oncall", parents=[connection], help="who of a rotation is on call, and until when"
    )
    oncall.add_argument("rotation", metavar="ROTATION")
    oncall.add_argument("--at", help="an ISO 8601 time with offset (default: now)")

"""The arguments of ``dlq``, ``show`` and ``ack``, and the checks argparse cannot make."""

from __future__ import annotations

import argparse
import json
import re
import uuid
from typing import Any

from uns_server.cli.errors import UsageError
from uns_server.cli.remote.connection import connection_arguments

COMMANDS = frozenset({"dlq", "show", "ack"})
REASON_MAX_CHARS = 1024  # the server's limit (uns_server.services.operations)
_TYPE = re.compile(r"[A-Za-z0-9._:-]{1,255}")


def _notification_id(value: str) -> str:
    try:
        return str(uuid.UUID(value.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a notification id (UUID): {value!r}") from None


def _notification_type(value: str) -> str:
    if _TYPE.fullmatch(value) is None:
        raise argparse.ArgumentTypeError(
            f"not a notification type (1-255 characters of [A-Za-z0-9._:-]): {value!r}"
        )
    return value


def _reason(value: str) -> str:
    if len(value) > REASON_MAX_CHARS:
        raise argparse.ArgumentTypeError(f"at most {REASON_MAX_CHARS} characters")
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def _metadata(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return parsed


def add_arguments(
    parser: argparse.ArgumentParser,
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
) -> None:
    """Add the connection options to ``uns-admin``'s parser and the commands ``dlq``,
    ``show`` and ``ack`` to its subcommands."""
    connection_arguments(parser, suppress=False)
    connection = argparse.ArgumentParser(add_help=False)
    connection_arguments(connection, suppress=True)

    dlq = commands.add_parser(
        "dlq",
        help="the dead-letter queue, on a server: list, replay, resolve",
        description="Dead letters are FAILED GUARANTEED notifications waiting for an "
        "operator. Needs an operator API key.",
    ).add_subparsers(dest="dlq_command", required=True, metavar="COMMAND")
    listing = dlq.add_parser(
        "list", parents=[connection], help="list every dead letter, newest first"
    )
    listing.add_argument("--type", type=_notification_type, help="only this notification type")
    listing.add_argument("--json", action="store_true", help="print the notifications as JSON")
    for name, verb, what in (
        ("replay", "replay", "open a new delivery cycle for"),
        ("resolve", "resolve", "clear the dead-letter flag (no new delivery) of"),
    ):
        bulk = dlq.add_parser(
            name,
            parents=[connection],
            help=f"{what} dead letters; --dry-run to preview",
            description=f"{what.capitalize()} the given dead letters, or --all of them "
            f"(optionally of one --type). One line per id with the outcome; refusals are "
            f"reported and the batch goes on (exit code 1). --dry-run asks the server what "
            f"it would answer for each id (validate_only) and changes nothing.",
        )
        bulk.add_argument(
            "ids", nargs="*", type=_notification_id, metavar="ID", help="notification ids"
        )
        bulk.add_argument("--all", action="store_true", help="every dead letter (see --type)")
        bulk.add_argument(
            "--type", type=_notification_type, help="with --all: only this notification type"
        )
        bulk.add_argument(
            "--reason",
            required=True,
            type=_reason,
            help=f"why you {verb} (recorded in the event; at most {REASON_MAX_CHARS} chars)",
        )
        bulk.add_argument(
            "--dry-run",
            action="store_true",
            help="change nothing: the server runs every check and reports what it would do",
        )
        bulk.add_argument("--json", action="store_true", help="print the outcomes as JSON")

    show = commands.add_parser(
        "show",
        parents=[connection],
        help="one notification and its full event timeline, from a server",
    )
    show.add_argument("notification_id", type=_notification_id, metavar="ID")
    show.add_argument("--json", action="store_true", help="print as JSON")

    ack = commands.add_parser(
        "ack",
        parents=[connection],
        help="acknowledge (or --dismiss) a notification on a server; needs a responder key",
    )
    ack.add_argument("notification_id", type=_notification_id, metavar="ID")
    ack.add_argument("--dismiss", action="store_true", help="settle as DISMISSED, not ACKED")
    ack.add_argument("--metadata", type=_metadata, metavar="JSON", help="a JSON object to record")
    ack.add_argument("--json", action="store_true", help="print the notification as JSON")


def check_usage(args: argparse.Namespace) -> None:
    """What argparse cannot say about the combination of options."""
    if args.command == "dlq" and args.dlq_command in ("replay", "resolve"):
        if args.all and args.ids:
            raise UsageError("give notification ids or --all, not both")
        if not args.all and not args.ids:
            raise UsageError("give notification ids, or --all for every dead letter")
        if args.type and not args.all:
            raise UsageError("--type selects dead letters for --all; with ids, leave it out")

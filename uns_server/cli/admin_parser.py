"""The ``uns-admin`` command line: every command, its options and their help.

Database-mode commands run in ``cli.admin``; ``dlq``, ``show`` and ``ack`` (and ``keys``,
``policies`` with ``--target``) add their options from ``cli.remote``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from uns_server.cli import heartbeats as heartbeat_commands
from uns_server.cli import people as people_commands
from uns_server.cli import remote
from uns_server.cli import windows as window_commands
from uns_server.domain import retention as retention_rules
from uns_server.settings import DATABASE_URL_DEFAULT

PROG = "uns-admin"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="UNS administration: migrations, API keys, policies, people, maintenance "
        "windows and retention on the database (or a server, with --target); the "
        "dead-letter queue, timelines and acknowledgements on a server (dlq, show, ack: "
        "see uns_server.cli.remote).",
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("UNS_DATABASE_URL") or DATABASE_URL_DEFAULT,
        help=f"[UNS_DATABASE_URL] default: {DATABASE_URL_DEFAULT}",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("migrate", help="upgrade the schema to head; prints the revision")

    connection = remote.connection_parent()  # keys, policies: remote with --target
    keys = commands.add_parser("keys", help="API keys").add_subparsers(
        dest="keys_command", required=True, metavar="COMMAND"
    )
    create = keys.add_parser(
        "create", parents=[connection], help="create a key; prints the secret once"
    )
    create.add_argument("--principal", required=True, help="the caller's name")
    create.add_argument(
        "--roles", required=True, help="comma-separated: producer, responder, operator"
    )
    create.add_argument(
        "--responds-for",
        default="",
        metavar="P1,P2",
        help="comma-separated: the other principals whose notifications a responder key "
        "may acknowledge, dismiss, get and watch (needs the responder role; without it "
        "a responder answers only for its own principal)",
    )
    create.add_argument("--description", default="", help="free text shown in listings")
    keys.add_parser("list", parents=[connection], help="list keys (never the secrets)")
    revoke = keys.add_parser(
        "revoke", parents=[connection], help="revoke a key by id or display prefix"
    )
    revoke.add_argument("key", metavar="ID_OR_PREFIX")

    pols = commands.add_parser("policies", help="delivery policies").add_subparsers(
        dest="policies_command", required=True, metavar="COMMAND"
    )
    put = pols.add_parser(
        "put",
        parents=[connection],
        help="write revisions from a YAML/JSON file: {notification_type, spec} or a list",
    )
    put.add_argument("--file", required=True, type=Path, help="YAML or JSON file ('-': stdin)")
    put.add_argument("--activate", action="store_true", help="activate in the same transaction")
    activate = pols.add_parser(
        "activate", parents=[connection], help="make a revision the ACTIVE one"
    )
    activate.add_argument("notification_type", metavar="TYPE")
    activate.add_argument("revision", metavar="REVISION", type=int)
    show = pols.add_parser(
        "show", parents=[connection], help="show the ACTIVE revision, or --revision N"
    )
    show.add_argument("notification_type", metavar="TYPE")
    show.add_argument("--revision", type=int, default=0)
    listing = pols.add_parser(
        "list",
        parents=[connection],
        help="list a type's revisions, newest first; without TYPE, every type's",
    )
    listing.add_argument(
        "notification_type",
        metavar="TYPE",
        nargs="?",
        help="the type (default: every type with a policy, in name order; on the database)",
    )

    people_commands.add_parsers(commands, connection)
    heartbeat_commands.add_parsers(commands, connection)
    window_commands.add_parsers(commands, connection)

    links_parser = commands.add_parser("links", help="signed action links").add_subparsers(
        dest="links_command", required=True, metavar="COMMAND"
    )
    revoke_link = links_parser.add_parser(
        "revoke",
        help="revoke an action link (its URL or token): it answers 404 from then on",
        description="Revokes one Acknowledge/Dismiss link on every replica at once. Only the "
        "SHA-256 of its token is stored. To revoke every outstanding link, rotate the "
        "signing keys instead (docs/deployment.md).",
    )
    revoke_link.add_argument("link", metavar="URL_OR_TOKEN")
    revoke_link.add_argument(
        "--action-link-keys",
        default=os.environ.get("UNS_ACTION_LINK_KEYS", ""),
        help="[UNS_ACTION_LINK_KEYS] the server's signing keys, to verify the link",
    )

    maintain = commands.add_parser(
        "maintain",
        help="retention: prune settled history; a dry run unless --apply",
        description="Prunes settled notifications (DELIVERED, DEDUPLICATED, resolved FAILED; "
        "no pending ack) with their events, stale events, expired dedup windows, and expires "
        "old idempotency keys. Never touches pending work, pending acks, unresolved dead "
        "letters, rows they are linked to, receipts or audit records. Without --apply it "
        "only prints what would be deleted; with it, it writes one RETENTION_APPLIED receipt.",
    )
    maintain.add_argument("--apply", action="store_true", help="delete (default: dry run)")
    maintain.add_argument(
        "--terminal-days",
        type=float,
        default=retention_rules.TERMINAL_DAYS_DEFAULT,
        help="age of settled notifications to prune, in days (default %(default)g)",
    )
    maintain.add_argument(
        "--events-days",
        type=float,
        default=retention_rules.EVENTS_DAYS_DEFAULT,
        help="age of events of settled notifications to prune, in days (default %(default)g)",
    )
    maintain.add_argument(
        "--dedup-days",
        type=float,
        default=retention_rules.DEDUP_DAYS_DEFAULT,
        help="days past its end before a dedup window is pruned (default %(default)g)",
    )
    maintain.add_argument(
        "--idempotency-seconds",
        type=int,
        default=retention_rules.IDEMPOTENCY_SECONDS_DEFAULT,
        help="age after which an idempotency key stops matching (default %(default)d)",
    )
    maintain.add_argument(
        "--limit",
        type=int,
        default=retention_rules.BATCH_LIMIT_DEFAULT,
        help="settled notifications considered per run (default %(default)d)",
    )
    maintain.add_argument("--json", action="store_true", help="print the report as JSON")
    remote.add_arguments(parser, commands)  # dlq, show, ack: over gRPC, not the database
    return parser

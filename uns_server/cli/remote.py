"""Remote operator commands of ``uns-admin``: the dead-letter queue, one notification's
timeline and acknowledgements, over the public gRPC API (``uns_clients``), so they work
against any reachable server, with an API key, instead of on its database.

::

    uns-admin --target uns.example:443 --tls --api-key-file ~/.uns/operator.key dlq list
    uns-admin dlq replay --all --type ops.failing --reason "webhook fixed" --dry-run
    uns-admin dlq resolve 0b7c...e1 4f2a...9d --reason "handled by phone"
    uns-admin show 0b7c...e1
    uns-admin ack 0b7c...e1 --dismiss --metadata '{"ticket": "OPS-12"}'
    uns-admin --target uns.example:443 --tls keys create --principal ci --roles producer
    uns-admin --target uns.example:443 --tls policies put --file policy.yaml --activate

``keys`` and ``policies`` work on the database by default; given ``--target`` (or
``UNS_TARGET``) they run here instead, over ``uns.v1.KeyService`` and
``uns.v1.PolicyService``, with the same output. A remote ``policies put`` of a list
writes one revision per call (not one transaction).

Connection options are accepted before the command (like ``--database-url``) or after
it: ``--target HOST:PORT`` (env ``UNS_TARGET``, default ``127.0.0.1:50051``),
``--api-key`` (env ``UNS_API_KEY``) or ``--api-key-file``, ``--tls``, ``--ca-file``,
``--tls-server-name``, ``--timeout``.

Roles: ``keys`` and ``policies`` need an operator key; ``dlq`` needs an operator key
(a producer key lists only its own dead letters and is refused Replay/ResolveFailure);
``show`` an operator key (a producer or responder key sees only its tenants'
notifications, anything else is "not found"); ``ack`` a responder key (for its own
principal and those its key responds for) or an operator key.

Exit codes: 0 everything succeeded; 1 the server refused or failed some operation (each
refusal of a batch is reported on its own line, the batch goes on; a dry run exits 1 when
the real run would be refused for some id); 2 usage error. Only authentication,
permission and connection failures stop a batch, since every later call would fail the
same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from uns.v1 import key_service_pb2 as key_pb
from uns.v1 import key_service_pb2_grpc as key_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import policy_service_pb2 as policy_pb
from uns.v1 import policy_service_pb2_grpc as policy_grpc
from uns.v1 import types_pb2 as t
from uns_clients import (
    AsyncClient,
    ClientConfig,
    DeadlineExceeded,
    HistoryCompacted,
    InvalidRequest,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    UnsError,
)
from uns_clients._errors import error_from_rpc
from uns_server.api.policy_servicer import spec_from_wire, spec_to_wire
from uns_server.domain.enums import Role
from uns_server.domain.policy import PolicyRevision
from uns_server.services import auth
from uns_server.services.policies import PolicyInput, revision_to_json

PROG = "uns-admin"
COMMANDS = frozenset({"dlq", "show", "ack"})
# Database commands that run here instead when a target is given.
LOCAL_OR_REMOTE = frozenset({"keys", "policies"})
TARGET_DEFAULT = "127.0.0.1:50051"
TIMEOUT_SECONDS_DEFAULT = 30.0
REASON_MAX_CHARS = 1024  # the server's limit (uns_server.services.operations)
DLQ_FILTER = "state = FAILED AND dead_letter = true"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

# Errors after which every further call of a batch would fail the same way.
_FATAL = (Unauthenticated, PermissionDenied, Unavailable, Unimplemented)
_REQUIRED_ROLE = {
    "dlq": "operator",
    "show": "operator",
    "ack": "responder or operator",
    "keys": "operator",
    "policies": "operator",
}
_TYPE = re.compile(r"[A-Za-z0-9._:-]{1,255}")


class UsageError(Exception):
    """Bad command-line input: exit 2."""


class Stop(Exception):
    """The command cannot go on (one message on stderr): exit 1."""


# --- parser ---------------------------------------------------------------------------


def _connection_arguments(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The connection options; ``suppress`` (after the command) leaves values given before
    the command alone unless repeated."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group(
        "server connection (dlq, show, ack; keys and policies with --target or UNS_TARGET)"
    )
    group.add_argument(
        "--target",
        metavar="HOST:PORT",
        default=default(None),
        help=f"[UNS_TARGET] the UNS server, default {TARGET_DEFAULT}",
    )
    group.add_argument(
        "--api-key", metavar="KEY", default=default(None), help="[UNS_API_KEY] the API key"
    )
    group.add_argument(
        "--api-key-file",
        metavar="PATH",
        type=Path,
        default=default(None),
        help="read the API key from this file (first line)",
    )
    group.add_argument(
        "--tls",
        action="store_true",
        default=default(False),
        help="use TLS (required by the server on anything but loopback)",
    )
    group.add_argument(
        "--ca-file",
        metavar="PATH",
        type=Path,
        default=default(None),
        help="PEM CA bundle to verify the server with (implies --tls)",
    )
    group.add_argument(
        "--tls-server-name",
        metavar="NAME",
        default=default(None),
        help="verify the server certificate against this name (implies --tls)",
    )
    group.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=default(TIMEOUT_SECONDS_DEFAULT),
        help=f"deadline of each call, default {TIMEOUT_SECONDS_DEFAULT:g}",
    )


def connection_parent() -> argparse.ArgumentParser:
    """A parent parser that accepts the connection options after a command (``keys`` and
    ``policies`` subcommands), leaving values given before the command alone."""
    connection = argparse.ArgumentParser(add_help=False)
    _connection_arguments(connection, suppress=True)
    return connection


def wants_remote(args: argparse.Namespace) -> bool:
    """Whether a ``keys`` / ``policies`` command runs against a server, not the database."""
    if args.command not in LOCAL_OR_REMOTE:
        return False
    return bool(getattr(args, "target", None) or os.environ.get("UNS_TARGET"))


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
    _connection_arguments(parser, suppress=False)
    connection = argparse.ArgumentParser(add_help=False)
    _connection_arguments(connection, suppress=True)

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


# --- configuration --------------------------------------------------------------------


def client_config(args: argparse.Namespace) -> ClientConfig:
    """The ``ClientConfig`` for the connection options and ``UNS_*`` environment."""
    target = args.target or os.environ.get("UNS_TARGET") or TARGET_DEFAULT
    if args.api_key is not None and args.api_key_file is not None:
        raise UsageError("give --api-key or --api-key-file, not both")
    if args.api_key_file is not None:
        try:
            lines = args.api_key_file.read_text().strip().splitlines()
        except OSError as exc:
            raise UsageError(f"cannot read {args.api_key_file}: {exc.strerror or exc}") from None
        api_key = lines[0].strip() if lines else ""
    else:
        api_key = args.api_key or os.environ.get("UNS_API_KEY") or ""
    if not api_key:
        raise UsageError("no API key: give --api-key, --api-key-file or set UNS_API_KEY")
    root_certificates = None
    if args.ca_file is not None:
        try:
            root_certificates = args.ca_file.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read {args.ca_file}: {exc.strerror or exc}") from None
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    try:
        return ClientConfig(
            target=target,
            api_key=api_key,
            tls=bool(args.tls or root_certificates is not None or args.tls_server_name),
            root_certificates=root_certificates,
            tls_server_name=args.tls_server_name,
            timeout_seconds=args.timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _channel(config: ClientConfig) -> grpc.aio.Channel:
    options = config.grpc_options()
    if not config.tls:
        return grpc.aio.insecure_channel(config.target, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=config.root_certificates)
    return grpc.aio.secure_channel(config.target, credentials, options=options)


# --- output helpers -------------------------------------------------------------------


def _json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    table = [list(header), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def _when(ts: Timestamp) -> str:
    if ts.seconds == 0 and ts.nanos == 0:
        return "-"
    return ts.ToDatetime(tzinfo=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _state(n: t.Notification) -> str:
    name = t.NotificationState.Name(n.state).removeprefix("NOTIFICATION_STATE_")
    return f"{name} (dead letter)" if n.dead_letter else name


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _describe(error: UnsError) -> str:
    text = f"{error.reason}: {error.message}"
    if error.violations:
        text += " (" + "; ".join(f"{k}: {v}" for k, v in error.violations.items()) + ")"
    return text


def _fatal_message(command: str, error: UnsError, target: str) -> str:
    text = _describe(error)
    if isinstance(error, PermissionDenied):
        role = _REQUIRED_ROLE.get(command, "operator")
        principal = error.metadata.get("principal")
        who = f" (this key belongs to {principal})" if principal else ""
        text += f"; `{command}` needs an API key with the {role} role{who}"
    elif isinstance(error, Unauthenticated):
        text += "; check --api-key / --api-key-file / UNS_API_KEY"
    elif isinstance(error, Unavailable):
        text += f"; is the server at {target} up (and --tls right)?"
    return text


# --- commands -------------------------------------------------------------------------


def _dlq_filter(notification_type: str | None) -> str:
    if not notification_type:
        return DLQ_FILTER
    return f'{DLQ_FILTER} AND notification_type = "{notification_type}"'


async def _dead_letters(client: AsyncClient, notification_type: str | None) -> list[t.Notification]:
    return [n async for n in client.list(filter=_dlq_filter(notification_type), page_size=1000)]


async def cmd_dlq_list(client: AsyncClient, args: argparse.Namespace) -> int:
    found = await _dead_letters(client, args.type)
    if args.json:
        _json([_dict(n) for n in found])
        return EXIT_OK
    if found:
        _table(
            ("ID", "TYPE", "PRINCIPAL", "SOURCE", "ATTEMPTS", "CYCLE", "UPDATED", "ERROR"),
            (
                (
                    n.id,
                    n.notification_type,
                    n.principal,
                    n.source,
                    str(n.attempts),
                    str(n.cycle),
                    _when(n.update_time),
                    _one_line(n.outcome.error_message, 60) or "-",
                )
                for n in found
            ),
        )
    kind = f" of type {args.type}" if args.type else ""
    print(f"{len(found)} dead letter{'s' if len(found) != 1 else ''}{kind}", file=sys.stderr)
    return EXIT_OK


@dataclass
class Outcome:
    """What happened (or would happen) to one id of a batch."""

    notification_id: str
    action: str  # replayed, resolved, would replay, would resolve, refused, would refuse
    detail: str
    ok: bool
    error: UnsError | None = None
    notification: t.Notification | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "notification_id": self.notification_id,
            "outcome": self.action.replace(" ", "_"),
            "ok": self.ok,
            "detail": self.detail,
        }
        if self.error is not None:
            out["error"] = {
                "reason": self.error.reason,
                "message": self.error.message,
                "metadata": self.error.metadata,
            }
        if self.notification is not None:
            out["notification"] = _dict(self.notification)
        return out


async def _act(
    client: AsyncClient, nid: str, replay: bool, reason: str, *, dry_run: bool
) -> Outcome:
    """Replay or resolve one id; a dry run asks the server what it would answer
    (``validate_only``: every check it would run, nothing written)."""
    try:
        if replay:
            n = await client.replay(nid, reason=reason, validate_only=dry_run)
            if dry_run:
                detail = f"cycle {n.cycle - 1} -> {n.cycle}, {n.notification_type}: {n.title}"
                return Outcome(nid, "would replay", _one_line(detail, 120), True, None, n)
            return Outcome(nid, "replayed", f"cycle {n.cycle}, state {_state(n)}", True, None, n)
        n = await client.resolve_failure(nid, reason=reason, validate_only=dry_run)
        if dry_run:
            detail = f"dead_letter cleared, stays FAILED, {n.notification_type}: {n.title}"
            return Outcome(nid, "would resolve", _one_line(detail, 120), True, None, n)
        detail = f"dead_letter cleared, state {_state(n)}"
        return Outcome(nid, "resolved", detail, True, None, n)
    except _FATAL:
        raise
    except DeadlineExceeded as exc:
        detail = _describe(exc)
        if not dry_run:
            detail += " (the server may still have acted: check with `show`)"
        return Outcome(nid, "failed", detail, False, exc)
    except UnsError as exc:
        return Outcome(nid, "would refuse" if dry_run else "refused", _describe(exc), False, exc)


async def cmd_dlq_bulk(client: AsyncClient, args: argparse.Namespace) -> int:
    replay = args.dlq_command == "replay"
    if args.all:
        ids = [n.id for n in await _dead_letters(client, args.type)]
    else:
        ids = list(dict.fromkeys(args.ids))
    outcomes: list[Outcome] = []
    stopped: UnsError | None = None
    for nid in ids:
        try:
            outcome = await _act(client, nid, replay, args.reason, dry_run=args.dry_run)
        except _FATAL as exc:
            stopped = exc
            break
        outcomes.append(outcome)
        if not args.json:
            print(f"{nid}  {outcome.action:<13}  {outcome.detail}", flush=True)
    if args.json:
        _json([o.to_json() for o in outcomes])
    done = sum(o.ok for o in outcomes)
    refused = len(outcomes) - done
    verb = "replay" if replay else "resolve"
    if args.dry_run:
        summary = f"dry run: would {verb} {done}, would refuse {refused}; nothing changed"
    else:
        summary = f"{'replayed' if replay else 'resolved'} {done}, refused or failed {refused}"
    if not ids:
        summary = "no dead letters" + (f" of type {args.type}" if args.type else "")
    if stopped is not None:
        message = _fatal_message("dlq", stopped, client.config.target)
        if outcomes:
            message += f"; stopped after {len(outcomes)} of {len(ids)} ({summary})"
        elif not args.dry_run:
            message += "; nothing was changed"
        raise Stop(message)
    print(summary, file=sys.stderr)
    return EXIT_FAILURE if refused else EXIT_OK


async def _timeline(config: ClientConfig, notification_id: str) -> tuple[list[t.Event], int]:
    """Every retained event of one notification, in order, and the retention horizon
    (0 when nothing was pruned). Reads WatchEvents with replay_history up to the first
    heartbeat, which the server sends once the history is caught up."""
    after = 0
    async with _channel(config) as channel:
        stub = pb_grpc.NotificationServiceStub(channel)
        while True:
            request = pb.WatchEventsRequest(
                notification_ids=[notification_id],
                after_sequence=after,
                replay_history=after == 0,
            )
            call = stub.WatchEvents(
                request, metadata=config.auth_metadata(), timeout=config.timeout_seconds
            )
            seen: list[t.Event] = []
            try:
                async for response in call:
                    if response.HasField("heartbeat"):
                        # The server positions every stream with a heartbeat once the
                        # history is caught up; from here it would only follow.
                        return seen, after
                    seen.append(response.event)
            except grpc.aio.AioRpcError as exc:
                error = error_from_rpc(exc)
                if isinstance(error, HistoryCompacted) and after == 0:
                    after = int(error.metadata.get("resync_from_sequence", "0") or 0)
                    if after > 0:
                        continue
                raise error from exc
            finally:
                call.cancel()
            raise Stop("the event stream ended before its history was complete")


def _integral(value: Any) -> Any:
    """Struct numbers are doubles: show 3.0 as 3."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def _payload_text(event: t.Event) -> str:
    payload = _integral(json_format.MessageToDict(event.payload))
    return json.dumps(payload, separators=(",", ":"), sort_keys=True) if payload else ""


async def cmd_show(client: AsyncClient, args: argparse.Namespace) -> int:
    n = await client.get(args.notification_id)
    events, horizon = await _timeline(client.config, n.id)
    if args.json:
        out: dict[str, Any] = {
            "notification": _dict(n),
            "events": [_dict(e) for e in events],
        }
        if horizon:
            out["history_pruned_through_sequence"] = horizon
        _json(out)
        return EXIT_OK
    policy = n.effective_policy
    if n.ack_state == t.ACK_STATE_UNSPECIFIED:
        ack = "none" + (" (not delivered yet)" if n.effective_policy.require_ack else "")
    else:
        ack = t.AckState.Name(n.ack_state).removeprefix("ACK_STATE_")
    rows: list[tuple[str, str]] = [
        ("type", n.notification_type),
        ("title", n.title),
        ("principal", n.principal),
        ("source", n.source),
        ("state", _state(n)),
        ("ack", ack + (f" by {n.ack_actor} at {_when(n.respond_time)}" if n.ack_actor else "")),
        ("attempts", f"{n.attempts} (cycle {n.cycle}, {n.cycle_attempts} in this cycle)"),
        ("channels", ", ".join(policy.channels) or "-"),
        ("created", _when(n.create_time)),
        ("updated", _when(n.update_time)),
    ]
    if n.outcome.error_message:
        rows.append(("error", _one_line(n.outcome.error_message, 200)))
    if n.ack_state == t.ACK_STATE_PENDING:
        rows.append(("ack deadline", _when(n.ack_deadline_time)))
    if n.state == t.NOTIFICATION_STATE_PENDING:
        rows.append(("next attempt", _when(n.next_attempt_time)))
    for label, value in (
        ("idempotency key", n.idempotency_key),
        ("dedup key", n.dedup_key),
        ("dedup owner", n.dedup_owner_id),
        ("dedup successor", n.dedup_successor_id),
        ("correlation id", n.correlation_id),
    ):
        if value:
            rows.append((label, value))
    print(f"notification {n.id}")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label.ljust(width)}  {value}")
    print()
    pruned = f"; events through sequence {horizon} were pruned by retention" if horizon else ""
    print(f"timeline: {len(events)} event{'s' if len(events) != 1 else ''}{pruned}")
    if events:
        _table(
            ("SEQUENCE", "AT", "KIND", "PAYLOAD"),
            (
                (
                    str(e.sequence),
                    _when(e.at),
                    t.EventKind.Name(e.kind).removeprefix("EVENT_KIND_"),
                    _payload_text(e),
                )
                for e in events
            ),
        )
    return EXIT_OK


async def cmd_ack(client: AsyncClient, args: argparse.Namespace) -> int:
    reply = await client.acknowledge(
        args.notification_id, dismiss=args.dismiss, metadata=args.metadata
    )
    n = reply.notification
    if args.json:
        _json({"notification": _dict(n), "idempotent_replay": reply.idempotent_replay})
        return EXIT_OK
    ack = t.AckState.Name(n.ack_state).removeprefix("ACK_STATE_")
    again = (
        " (already settled so by this actor; nothing changed)" if reply.idempotent_replay else ""
    )
    print(f"{n.id}  {ack} by {n.ack_actor} at {_when(n.respond_time)}{again}")
    return EXIT_OK


# --- keys and policies (remote mode of the database commands) -------------------------


async def _call(config: ClientConfig, method: Any, request: Message) -> Any:
    """One unary call with the key and deadline; typed errors (``UnsError``)."""
    try:
        return await method(
            request, metadata=config.auth_metadata(), timeout=config.timeout_seconds
        )
    except grpc.aio.AioRpcError as exc:
        raise error_from_rpc(exc) from exc


_ROLE_TO_WIRE: dict[str, Any] = {
    "producer": key_pb.ROLE_PRODUCER,
    "responder": key_pb.ROLE_RESPONDER,
    "operator": key_pb.ROLE_OPERATOR,
}


def _role_name(value: int) -> str:
    return key_pb.Role.Name(value).removeprefix("ROLE_").lower()  # type: ignore[arg-type]


def responds_for_note(responds_for: Sequence[str]) -> str:
    """``, answering also for a,b`` for the key-created message (both modes)."""
    return f", answering also for {','.join(responds_for)}" if responds_for else ""


def _key_when(ts: Timestamp) -> str:
    """The database mode's format: seconds, Z."""
    return ts.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def cmd_keys_create(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    principal = args.principal.strip()
    if not principal:
        raise UsageError("--principal must not be empty")
    try:
        roles = sorted(auth.parse_roles(args.roles.split(",")))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not roles:
        raise UsageError("--roles needs at least one of producer, responder, operator")
    responds_for = sorted(auth.parse_responds_for(args.responds_for))
    if responds_for and Role.RESPONDER not in roles:
        raise UsageError("--responds-for needs the responder role in --roles")
    request = key_pb.CreateApiKeyRequest(
        principal=principal,
        roles=[_ROLE_TO_WIRE[r.value] for r in roles],
        description=args.description,
        responds_for=responds_for,
    )
    reply = await _call(config, key_grpc.KeyServiceStub(channel).CreateApiKey, request)
    key = reply.api_key
    print(reply.secret, flush=True)
    print(
        f"created key {key.id} (prefix {key.prefix}) for {key.principal} with roles "
        f"{','.join(_role_name(r) for r in key.roles)}"
        f"{responds_for_note(list(key.responds_for))}. The secret above is shown only "
        "once: store it now. Clients send it as 'authorization: Bearer <key>'.",
        file=sys.stderr,
    )
    return EXIT_OK


async def cmd_keys_list(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    stub = key_grpc.KeyServiceStub(channel)
    found: list[key_pb.ApiKey] = []
    token = ""
    while True:
        request = key_pb.ListApiKeysRequest(page_size=1000, page_token=token)
        reply = await _call(config, stub.ListApiKeys, request)
        found += reply.api_keys
        token = reply.next_page_token
        if not token:
            break
    _table(
        ("ID", "PREFIX", "PRINCIPAL", "ROLES", "RESPONDS_FOR", "CREATED", "REVOKED"),
        (
            (
                k.id,
                k.prefix,
                k.principal,
                ",".join(_role_name(r) for r in k.roles),
                ",".join(k.responds_for) or "-",
                _key_when(k.create_time),
                _key_when(k.revoke_time) if k.HasField("revoke_time") else "-",
            )
            for k in found
        ),
    )
    return EXIT_OK


async def cmd_keys_revoke(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    target = args.key.strip()
    if not target:
        raise UsageError("give a key id or prefix")
    request = key_pb.RevokeApiKeyRequest(key=target)
    reply = await _call(config, key_grpc.KeyServiceStub(channel).RevokeApiKey, request)
    key = reply.api_key
    print(
        f"revoked key {key.id} (prefix {key.prefix}, principal {key.principal}); "
        f"servers stop accepting it within {auth.CACHE_SECONDS:g} s",
        file=sys.stderr,
    )
    return EXIT_OK


def _revision(wire: policy_pb.PolicyRevision) -> dict[str, Any]:
    """The database mode's JSON view of a revision."""
    revision = PolicyRevision(
        policy_id=wire.policy_id,
        notification_type=wire.notification_type,
        revision=wire.revision,
        spec=spec_from_wire(wire.spec),
        content_hash=wire.content_hash,
        active=wire.state == policy_pb.POLICY_REVISION_STATE_ACTIVE,
        created_by=wire.created_by,
        created_at=wire.create_time.ToDatetime(tzinfo=UTC),
        activated_at=(
            wire.activate_time.ToDatetime(tzinfo=UTC) if wire.HasField("activate_time") else None
        ),
    )
    return revision_to_json(revision)


async def cmd_policies_put(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    items: list[PolicyInput]
    items, is_list = args.policy_inputs
    stub = policy_grpc.PolicyServiceStub(channel)
    out = []
    for item in items:
        request = policy_pb.PutPolicyRevisionRequest(
            notification_type=item.notification_type,
            spec=spec_to_wire(item.spec),
            activate=args.activate,
        )
        reply = await _call(config, stub.PutPolicyRevision, request)
        out.append(_revision(reply.revision))
    print(json.dumps(out if is_list else out[0], indent=2))
    return EXIT_OK


async def cmd_policies_activate(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    request = policy_pb.ActivatePolicyRevisionRequest(
        notification_type=args.notification_type, revision=args.revision
    )
    stub = policy_grpc.PolicyServiceStub(channel)
    reply = await _call(config, stub.ActivatePolicyRevision, request)
    print(json.dumps(_revision(reply.revision), indent=2))
    return EXIT_OK


async def cmd_policies_show(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    request = policy_pb.GetPolicyRequest(
        notification_type=args.notification_type, revision=args.revision
    )
    reply = await _call(config, policy_grpc.PolicyServiceStub(channel).GetPolicy, request)
    print(json.dumps(_revision(reply.revision), indent=2))
    return EXIT_OK


async def cmd_policies_list(channel: grpc.aio.Channel, config: ClientConfig, args: Any) -> int:
    stub = policy_grpc.PolicyServiceStub(channel)
    revisions: list[dict[str, Any]] = []
    token = ""
    while True:
        request = policy_pb.ListPolicyRevisionsRequest(
            notification_type=args.notification_type, page_size=1000, page_token=token
        )
        reply = await _call(config, stub.ListPolicyRevisions, request)
        revisions += [_revision(r) for r in reply.revisions]
        token = reply.next_page_token
        if not token:
            break
    print(json.dumps(revisions, indent=2))
    return EXIT_OK


_ADMIN = {
    ("keys", "create"): cmd_keys_create,
    ("keys", "list"): cmd_keys_list,
    ("keys", "revoke"): cmd_keys_revoke,
    ("policies", "put"): cmd_policies_put,
    ("policies", "activate"): cmd_policies_activate,
    ("policies", "show"): cmd_policies_show,
    ("policies", "list"): cmd_policies_list,
}


async def _run(args: argparse.Namespace, config: ClientConfig) -> int:
    if args.command in LOCAL_OR_REMOTE:
        command = _ADMIN[(args.command, getattr(args, f"{args.command}_command"))]
        async with _channel(config) as channel:
            return await command(channel, config, args)
    async with AsyncClient(config) as client:
        if args.command == "dlq":
            if args.dlq_command == "list":
                return await cmd_dlq_list(client, args)
            return await cmd_dlq_bulk(client, args)
        if args.command == "show":
            return await cmd_show(client, args)
        return await cmd_ack(client, args)


def check_usage(args: argparse.Namespace) -> None:
    """What argparse cannot say about the combination of options."""
    if args.command == "dlq" and args.dlq_command in ("replay", "resolve"):
        if args.all and args.ids:
            raise UsageError("give notification ids or --all, not both")
        if not args.all and not args.ids:
            raise UsageError("give notification ids, or --all for every dead letter")
        if args.type and not args.all:
            raise UsageError("--type selects dead letters for --all; with ids, leave it out")


def _fail(code: int, message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def main(args: argparse.Namespace) -> int:
    """Run a remote command parsed by ``uns-admin``'s parser; returns the exit code."""
    # Retries are part of each call; the outcome is reported once, at the end.
    logging.getLogger("uns_clients").setLevel(logging.ERROR)
    try:
        check_usage(args)
        config = client_config(args)
        return asyncio.run(_run(args, config))
    except UsageError as exc:
        return _fail(EXIT_USAGE, str(exc))
    except Stop as exc:
        return _fail(EXIT_FAILURE, str(exc))
    except InvalidRequest as exc:
        # As the database mode: the server found the input invalid.
        code = EXIT_USAGE if args.command in LOCAL_OR_REMOTE else EXIT_FAILURE
        return _fail(code, _describe(exc))
    except UnsError as exc:
        target = args.target or os.environ.get("UNS_TARGET") or TARGET_DEFAULT
        return _fail(EXIT_FAILURE, _fatal_message(args.command, exc, target))
    except KeyboardInterrupt:
        return _fail(130, "interrupted")

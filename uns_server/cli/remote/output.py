"""Output of the remote commands: tables, timestamps and JSON, the one-line
description of a server refusal, and the exit codes of ``uns-admin``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from uns.v1 import types_pb2 as t
from uns_clients import PermissionDenied, Unauthenticated, Unavailable, Unimplemented, UnsError

PROG = "uns-admin"
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

# Errors after which every further call of a batch would fail the same way.
FATAL = (Unauthenticated, PermissionDenied, Unavailable, Unimplemented)
_REQUIRED_ROLE = {
    "dlq": "operator",
    "show": "operator",
    "ack": "responder or operator",
    "keys": "operator",
    "policies": "operator",
    "windows": "operator",
}


class Stop(Exception):
    """The command cannot go on (one message on stderr): exit 1."""


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def as_dict(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    table = [list(header), *(list(r) for r in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def when(ts: Timestamp) -> str:
    if ts.seconds == 0 and ts.nanos == 0:
        return "-"
    return ts.ToDatetime(tzinfo=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def state_name(n: t.Notification) -> str:
    name = t.NotificationState.Name(n.state).removeprefix("NOTIFICATION_STATE_")
    return f"{name} (dead letter)" if n.dead_letter else name


def one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(error: UnsError) -> str:
    text = f"{error.reason}: {error.message}"
    if error.violations:
        text += " (" + "; ".join(f"{k}: {v}" for k, v in error.violations.items()) + ")"
    return text


def fatal_message(command: str, error: UnsError, target: str) -> str:
    text = describe(error)
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

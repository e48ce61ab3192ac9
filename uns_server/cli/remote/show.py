"""``uns-admin show``: one notification and its event timeline."""

from __future__ import annotations

import argparse
import json
from typing import Any

import grpc
from google.protobuf import json_format

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, ClientConfig, HistoryCompacted
from uns_clients._errors import error_from_rpc
from uns_server.cli.remote.connection import open_channel
from uns_server.cli.remote.output import (
    EXIT_OK,
    Stop,
    as_dict,
    one_line,
    print_json,
    state_name,
    table,
    when,
)


async def _timeline(config: ClientConfig, notification_id: str) -> tuple[list[t.Event], int]:
    """Every retained event of one notification, in order, and the retention horizon
    (0 when nothing was pruned). Reads WatchEvents with replay_history up to the first
    heartbeat, which the server sends once the history is caught up."""
    after = 0
    async with open_channel(config) as channel:
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
            "notification": as_dict(n),
            "events": [as_dict(e) for e in events],
        }
        if horizon:
            out["history_pruned_through_sequence"] = horizon
        print_json(out)
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
        ("state", state_name(n)),
        ("ack", ack + (f" by {n.ack_actor} at {when(n.respond_time)}" if n.ack_actor else "")),
        ("attempts", f"{n.attempts} (cycle {n.cycle}, {n.cycle_attempts} in this cycle)"),
        ("channels", ", ".join(policy.channels) or "-"),
        ("created", when(n.create_time)),
        ("updated", when(n.update_time)),
    ]
    if n.outcome.error_message:
        rows.append(("error", one_line(n.outcome.error_message, 200)))
    if n.ack_state == t.ACK_STATE_PENDING:
        rows.append(("ack deadline", when(n.ack_deadline_time)))
    if n.state == t.NOTIFICATION_STATE_PENDING:
        rows.append(("next attempt", when(n.next_attempt_time)))
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
        table(
            ("SEQUENCE", "AT", "KIND", "PAYLOAD"),
            (
                (
                    str(e.sequence),
                    when(e.at),
                    t.EventKind.Name(e.kind).removeprefix("EVENT_KIND_"),
                    _payload_text(e),
                )
                for e in events
            ),
        )
    return EXIT_OK

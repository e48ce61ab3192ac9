"""``uns-admin ack``: acknowledge or dismiss one notification."""

from __future__ import annotations

import argparse

from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient
from uns_server.cli.remote.output import EXIT_OK, as_dict, print_json, when


async def cmd_ack(client: AsyncClient, args: argparse.Namespace) -> int:
    reply = await client.acknowledge(
        args.notification_id, dismiss=args.dismiss, metadata=args.metadata
    )
    n = reply.notification
    if args.json:
        print_json({"notification": as_dict(n), "idempotent_replay": reply.idempotent_replay})
        return EXIT_OK
    ack = t.AckState.Name(n.ack_state).removeprefix("ACK_STATE_")
    again = (
        " (already settled so by this actor; nothing changed)" if reply.idempotent_replay else ""
    )
    print(f"{n.id}  {ack} by {n.ack_actor} at {when(n.respond_time)}{again}")
    return EXIT_OK

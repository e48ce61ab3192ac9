"""Send one notification, print its id, and follow its events until it settles.

    UNS_TARGET=127.0.0.1:50051 UNS_API_KEY="$(cat uns-dev-key.txt)" \
        python clients/python/examples/producer.py

"Settled" means the terminal acknowledgement event (ACKED, DISMISSED, TIMED_OUT) when
the notification requires one, else its final DELIVERY_RESULT. The watch replays the
notification's history first, so no event is missed between send() and watch(), and it
reconnects by itself if the server restarts meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import sys

from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, UnsError

ACK_SETTLED = {t.EVENT_KIND_ACKED, t.EVENT_KIND_DISMISSED, t.EVENT_KIND_TIMED_OUT}


def settles(event: t.Event, *, require_ack: bool) -> bool:
    """Whether ``event`` is the last one the producer has to wait for."""
    if event.kind in ACK_SETTLED or event.kind == t.EVENT_KIND_DEDUP_SATISFIED:
        return True
    if event.kind != t.EVENT_KIND_DELIVERY_RESULT:
        return False
    status = event.payload["status"]  # PENDING means a retry is scheduled
    return status == "FAILED" or (status == "DELIVERED" and not require_ack)


async def run(target: str, api_key: str) -> t.Event:
    """Send, print the id and each event; return the settling event."""
    async with AsyncClient(target, api_key=api_key) as uns:
        sent = await uns.send(
            notification_type="demo.disk_space",
            intent="WARNING",
            title="Disk almost full",
            message="92% used on db-1",
            source="example-producer",
            metadata={"host": "db-1", "used_percent": 92},
        )
        print(sent.notification_id, flush=True)
        async for event in uns.watch(notification_ids=[sent.notification_id], replay_history=True):
            print(f"{event.sequence} {t.EventKind.Name(event.kind)}", flush=True)
            if settles(event, require_ack=sent.require_ack):
                return event
    raise RuntimeError("the event stream ended before the notification settled")


def main() -> int:
    target = os.environ.get("UNS_TARGET", "127.0.0.1:50051")
    api_key = os.environ.get("UNS_API_KEY")
    if not api_key:
        print("set UNS_API_KEY (e.g. the key in uns-dev-key.txt)", file=sys.stderr)
        return 2
    try:
        event = asyncio.run(run(target, api_key))
    except UnsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    failed = event.kind == t.EVENT_KIND_DELIVERY_RESULT and event.payload["status"] == "FAILED"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The obligation over time: a scheduled send, its plan, and its withdrawal.

    UNS_TARGET=127.0.0.1:50051 UNS_API_KEY="$(cat uns-dev-key.txt)" \
        python clients/python/examples/over_time.py

Asks Simulate for the plan of a notification scheduled an hour from now (its delivery,
then any reminders, escalation steps and the ack deadline of its type's policy), sends
it, and withdraws it again because the condition it reported has cleared. Prints one
line per planned step, then the id and the final state.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime, timedelta

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_clients import AsyncClient, NotWithdrawable, SendFields, UnsError


async def run(target: str, api_key: str) -> t.Notification:
    async with AsyncClient(target, api_key=api_key) as uns:
        request: SendFields = {
            "notification_type": "demo.maintenance_window",
            "intent": "ACTION_REQUIRED",
            "title": "Maintenance starts in one hour",
            "message": "db-1 will be read-only from 02:00 to 02:30",
            "source": "example-scheduler",
            # Accepted now (idempotent, policy frozen), first attempted in an hour.
            "schedule_time": datetime.now(UTC) + timedelta(hours=1),
        }
        plan = await uns.simulate(**request)
        for step in plan.planned_steps:
            kind = pb.PlannedStepKind.Name(step.kind).removeprefix("PLANNED_STEP_KIND_")
            held = " (held by quiet hours)" if step.held_by_quiet_hours else ""
            minutes = round(step.offset.ToTimedelta().total_seconds() / 60)
            print(f"{kind} {step.number} at +{minutes} min{held}", flush=True)

        sent = await uns.send(**request)
        print(sent.notification_id, flush=True)
        # The maintenance was cancelled: the obligation no longer stands.
        try:
            return await uns.withdraw(sent.notification_id, reason="maintenance cancelled")
        except NotWithdrawable:  # already delivered and settled
            return await uns.get(sent.notification_id)


def main() -> int:
    target = os.environ.get("UNS_TARGET", "127.0.0.1:50051")
    api_key = os.environ.get("UNS_API_KEY")
    if not api_key:
        print("set UNS_API_KEY (e.g. the key in uns-dev-key.txt)", file=sys.stderr)
        return 2
    try:
        notification = asyncio.run(run(target, api_key))
    except UnsError as exc:
        print(f"{exc.reason}: {exc}", file=sys.stderr)
        return 1
    print(t.NotificationState.Name(notification.state), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

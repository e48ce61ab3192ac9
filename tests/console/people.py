"""People and rotations for the console's people page (its test and the screenshots),
written through uns.v1.RecipientService as an operator would."""

from __future__ import annotations

from datetime import timedelta

from tests.console.conftest import ConsoleRig
from tests.support.people import minutes, put_recipients, put_rotation, timestamp
from uns.v1 import recipient_service_pb2 as pb
from uns.v1 import types_pb2 as t

SHIFT = minutes(60)
BEGAN = -timedelta(minutes=40)  # the first shift began 40 minutes ago


async def put_people(rig: ConsoleRig) -> None:
    await put_recipients(
        rig.server,
        (
            pb.Recipient(
                recipient_id=rid,
                display_name=name,
                time_zone=zone,
                contacts=[pb.Contact(channel="hook", address=f"https://hooks.example.com/{rid}")],
                quiet_hours=(
                    t.QuietHours(time_zone=zone, start="22:00", end="07:00")
                    if rid == "bob"
                    else None
                ),
            )
            for rid, name, zone in (
                ("alice", "Alice Martin", "Europe/Paris"),
                ("bob", "Bob Okafor", "America/New_York"),
                ("carol", "Carol Ng", "Asia/Singapore"),
            )
        ),
    )
    start = rig.clock() + BEGAN
    # primary: alice's shift, 20 more minutes.
    await put_rotation(rig.server, "primary", ["alice", "bob"], start=start, shift=SHIFT)
    # secondary: carol swaps in for bob's shift, ending 10 minutes from now.
    cover = pb.RotationOverride(
        recipient_id="carol",
        start_time=timestamp(rig.clock() - timedelta(hours=2)),
        end_time=timestamp(rig.clock() + timedelta(minutes=10)),
    )
    await put_rotation(
        rig.server, "secondary", ["bob", "alice"], start=start, shift=SHIFT, overrides=[cover]
    )

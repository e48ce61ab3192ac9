"""People and rotations for the console's people page (its test and the screenshots),
written through uns.v1.RecipientService as an operator would."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from tests.console.conftest import ConsoleRig
from tests.support.server import KEYS, Client
from uns.v1 import recipient_service_pb2 as pb
from uns.v1 import recipient_service_pb2_grpc as pb_grpc
from uns.v1 import types_pb2 as t

SHIFT = timedelta(hours=1)
BEGAN = -timedelta(minutes=40)  # the first shift began 40 minutes ago


def ts(rig: ConsoleRig, offset: timedelta) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(rig.clock() + offset)
    return out


async def put_people(rig: ConsoleRig) -> None:
    channel = grpc.aio.insecure_channel(rig.server.target)
    rig.server.channels.append(channel)
    people: Any = Client(pb_grpc.RecipientServiceStub(channel), KEYS["oscar"])  # type: ignore[arg-type]
    for rid, name, zone in (
        ("alice", "Alice Martin", "Europe/Paris"),
        ("bob", "Bob Okafor", "America/New_York"),
        ("carol", "Carol Ng", "Asia/Singapore"),
    ):
        contact = pb.Contact(channel="hook", address=f"https://hooks.example.com/{rid}")
        quiet = t.QuietHours(time_zone=zone, start="22:00", end="07:00") if rid == "bob" else None
        await people.PutRecipient(
            pb.PutRecipientRequest(
                recipient=pb.Recipient(
                    recipient_id=rid,
                    display_name=name,
                    time_zone=zone,
                    contacts=[contact],
                    quiet_hours=quiet,
                )
            )
        )
    shift = duration_pb2.Duration(seconds=int(SHIFT.total_seconds()))
    await people.PutRotation(
        pb.PutRotationRequest(
            rotation=pb.Rotation(
                rotation_id="primary",
                members=["alice", "bob"],
                start_time=ts(rig, BEGAN),  # alice's shift: 20 more minutes
                shift=shift,
                time_zone="UTC",
            )
        )
    )
    await people.PutRotation(
        pb.PutRotationRequest(
            rotation=pb.Rotation(
                rotation_id="secondary",
                members=["bob", "alice"],
                start_time=ts(rig, BEGAN),
                shift=shift,
                time_zone="UTC",
                overrides=[  # carol swaps in for bob's shift, ending 10 minutes from now
                    pb.RotationOverride(
                        recipient_id="carol",
                        start_time=ts(rig, -timedelta(hours=2)),
                        end_time=ts(rig, timedelta(minutes=10)),
                    )
                ],
            )
        )
    )

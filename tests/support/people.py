"""People, rotations and policies written through a real server's ``RecipientService``
and ``PolicyService`` as an operator, and those services' stubs with any test key: the
setup every test of people, rotations and policies shares."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tests.support.server import KEYS, Client, RunningServer
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import policy_service_pb2_grpc as ppb_grpc
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import recipient_service_pb2_grpc as rpb_grpc
from uns.v1 import types_pb2 as t

Contacts = Iterable[tuple[str, str]]
"""A person's contacts: (channel, address) pairs."""


def stub_as(server: RunningServer, service: Any, who: str) -> Client:
    """``service``'s stub (e.g. ``rpb_grpc.RecipientServiceStub``) with ``who``'s key."""
    channel = grpc.aio.insecure_channel(server.target)
    server.channels.append(channel)
    return Client(service(channel), KEYS[who])


def operator_stub(server: RunningServer, service: Any) -> Client:
    """``service``'s stub with oscar's (the operator's) key."""
    return stub_as(server, service, "oscar")


def minutes(n: float) -> Duration:
    out = Duration()
    out.FromTimedelta(timedelta(minutes=n))
    return out


def timestamp(value: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(value)
    return out


async def put_recipients(server: RunningServer, recipients: Iterable[rpb.Recipient]) -> None:
    """Put each of ``recipients`` as the operator."""
    stub = operator_stub(server, rpb_grpc.RecipientServiceStub)
    for recipient in recipients:
        await stub.PutRecipient(rpb.PutRecipientRequest(recipient=recipient))


async def put_people(server: RunningServer, people: Mapping[str, Contacts]) -> None:
    """One recipient per id (display name its title, time zone UTC), with its contacts."""
    await put_recipients(
        server,
        (
            rpb.Recipient(
                recipient_id=rid,
                display_name=rid.title(),
                time_zone="UTC",
                contacts=[rpb.Contact(channel=c, address=a) for c, a in contacts],
            )
            for rid, contacts in people.items()
        ),
    )


async def put_rotation(
    server: RunningServer,
    rotation_id: str,
    members: Iterable[str],
    *,
    start: datetime,
    shift: Duration,
    overrides: Iterable[rpb.RotationOverride] = (),
) -> None:
    """A rotation in UTC: ``members`` take turns of ``shift`` from ``start``, save where
    ``overrides`` put someone else in."""
    await operator_stub(server, rpb_grpc.RecipientServiceStub).PutRotation(
        rpb.PutRotationRequest(
            rotation=rpb.Rotation(
                rotation_id=rotation_id,
                members=list(members),
                start_time=timestamp(start),
                shift=shift,
                time_zone="UTC",
                overrides=list(overrides),
            )
        )
    )


def acked_spec(**fields: Any) -> ppb.PolicySpec:
    """A GUARANTEED spec that waits for an answer (4 hours unless ``fields`` say)."""
    values: dict[str, Any] = {
        "delivery_mode": t.DELIVERY_MODE_GUARANTEED,
        "require_ack": True,
        "ack_timeout_minutes": 240,
    }
    values.update(fields)
    return ppb.PolicySpec(**values)


async def put_policy(
    server: RunningServer, notification_type: str, spec: ppb.PolicySpec
) -> ppb.PolicyRevision:
    """Write ``spec`` for ``notification_type`` and make it the ACTIVE revision."""
    reply = await operator_stub(server, ppb_grpc.PolicyServiceStub).PutPolicyRevision(
        ppb.PutPolicyRevisionRequest(notification_type=notification_type, spec=spec, activate=True)
    )
    return reply.revision  # type: ignore[no-any-return]

"""Acknowledging as the operator, policies and keys from the console: the same
services as gRPC, audited with the operator and ``via: console``."""

from __future__ import annotations

import asyncio
import re

import grpc
import httpx
import pytest

from tests.console.conftest import ConsoleRig
from tests.support.policies import activate_policy
from tests.support.server import KEYS
from uns.v1 import audit_service_pb2 as audit_pb
from uns.v1 import audit_service_pb2_grpc as audit_grpc
from uns.v1 import types_pb2 as t
from uns_server.domain.enums import DeliveryMode

pytestmark = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


async def ack_records(rig: ConsoleRig, nid: str) -> list[audit_pb.AckAuditRecord]:
    channel = grpc.aio.insecure_channel(rig.server.target)
    try:
        reply = await audit_grpc.AuditServiceStub(channel).ListAckAuditRecords(
            audit_pb.ListAckAuditRecordsRequest(notification_id=nid),
            metadata=(("authorization", f"Bearer {KEYS['oscar']}"),),
        )
    finally:
        await channel.close()
    return list(reply.records)


async def test_an_operator_dismisses_a_pending_ack_from_the_console(console: ConsoleRig) -> None:
    nid = await console.send("needs-answer", "ops.ack")
    assert await console.deliver() == 1
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        page = await http.get(console.url(f"/console/notifications/{nid}"))
        assert 'id="do-ack"' in page.text and 'id="do-dismiss"' in page.text
        assert 'id="do-replay"' not in page.text  # delivered: nothing to replay
        done = await http.post(
            console.url(f"/console/notifications/{nid}/dismiss"),
            data={"csrf": csrf, "reason": "false alarm", "confirm": "yes"},
        )
        assert done.status_code == 303
        conflict = await http.post(
            console.url(f"/console/notifications/{nid}/ack"),
            data={"csrf": csrf, "reason": "changed my mind", "confirm": "yes"},
        )
        assert conflict.status_code == 409 and "ACK_CONFLICT" in conflict.text
    n = await console.get(nid)
    assert n.ack_state == t.ACK_STATE_DISMISSED
    [record] = await ack_records(console, nid)
    assert (record.acked_by, record.via) == ("oscar", "console")


async def test_activating_an_older_policy_revision(console: ConsoleRig) -> None:
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        listing = await http.get(console.url("/console/policies"))
        assert "ops.hook" in listing.text
        await activate_policy(
            str(console.server.app.settings.database_url),
            "ops.hook",
            channels=["hook"],
            delivery_mode=DeliveryMode.BEST_EFFORT,
            require_ack=False,
        )
        page = await http.get(console.url("/console/policies/ops.hook"))
        # Active (2) against the newest (2) by default; any two side by side on request.
        diff = await http.get(console.url("/console/policies/ops.hook?a=1&b=2"))
        assert 'class="d-replace"' in diff.text and "BEST_EFFORT" in diff.text
        assert 'id="activate-1"' in page.text and 'id="activate-2"' not in page.text
        unconfirmed = await http.post(
            console.url("/console/policies/ops.hook/activate"), data={"csrf": csrf, "revision": 1}
        )
        assert unconfirmed.status_code == 400
        done = await http.post(
            console.url("/console/policies/ops.hook/activate"),
            data={"csrf": csrf, "revision": 1, "confirm": "yes"},
        )
        assert done.status_code == 303
        after = await http.get(console.url("/console/policies/ops.hook"))
        assert 'id="activate-2"' in after.text and 'id="activate-1"' not in after.text


async def test_a_key_is_created_shown_once_and_revoking_it_ends_its_console_sessions(
    console: ConsoleRig,
) -> None:
    async with httpx.AsyncClient() as http:
        csrf = await console.sign_in(http)
        created = await http.post(
            console.url("/console/keys"),
            data={"csrf": csrf, "principal": "night-ops", "role": "operator", "description": "x"},
        )
        assert created.status_code == 200
        match = re.search(r'id="secret" readonly value="(uns_[^"]+)"', created.text)
        assert match
        secret = match.group(1)
        listing = await http.get(console.url("/console/keys"))
        assert "night-ops" in listing.text and secret not in listing.text  # shown once
        key_id = re.findall(r'action="/console/keys/([^/]+)/revoke"', listing.text)[-1]

    async with httpx.AsyncClient() as night:
        signed = await night.post(console.url("/console/sign-in"), data={"api_key": secret})
        assert signed.status_code == 303
        assert (await night.get(console.url("/console/"))).status_code == 200
        async with httpx.AsyncClient() as http:
            csrf = await console.sign_in(http)
            revoked = await http.post(
                console.url(f"/console/keys/{key_id}/revoke"), data={"csrf": csrf, "confirm": "yes"}
            )
            assert revoked.status_code == 303
        console.clock.advance(seconds=1)
        # The authenticator caches a key for up to 5 s (as for gRPC); then the session ends.
        for _ in range(60):
            if (await night.get(console.url("/console/"))).status_code == 303:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the revoked key's session still works")

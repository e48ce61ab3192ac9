"""Twilio SMS and voice through a real server with its HTTP surface, on SQLite
(SPEC §7 "People reached anywhere"): a person's text goes through the
Messages API and their call through the Calls API of a recording fake of Twilio; their
reply (``ACK``, ``DISMISS <code>``) and the key they press come back signed as Twilio
signs (the ``twilio`` package's ``RequestValidator`` computes the signatures here) and
settle as the person ``via`` the channel type, once; unsigned or wrongly signed
callbacks are 403 and change nothing; a call nobody answers is recorded as not reached."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit
from xml.etree import ElementTree

import grpc
import httpx
import pytest
from google.protobuf import json_format
from twilio.request_validator import RequestValidator

from tests.http.conftest import LINK_KEY
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from tests.support.people import acked_spec, put_people, put_policy
from tests.support.server import KEYS, RunningServer, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import audit_service_pb2 as audit_pb
from uns.v1 import audit_service_pb2_grpc as audit_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2 as t
from uns_server.domain.twilio import answer_code, twilio_signature

SID = "AC" + "0123456789abcdef" * 2
TOKEN = "twilio-auth-token-for-tests"
SMS_NUMBER = "+14155550100"
VOICE_NUMBER = "+14155550199"
ALICE = "+14155552671"
BOB = "+442071838750"
SMS_TYPE, CALL_TYPE = "ops.text", "ops.call"
SMS_PATH, VOICE_STATUS_PATH = "/integrations/twilio/sms", "/integrations/twilio/voice/status"


@dataclass
class TwilioRig:
    server: RunningServer
    rx: HttpReceiver

    @property
    def public_url(self) -> str:
        return self.server.app.public_url

    def created(self, resource: str) -> list[dict[str, str]]:
        path = f"/2010-04-01/Accounts/{SID}/{resource}.json"
        return [_form(r) for r in self.rx.requests if r.path == path]

    async def send(self, notification_type: str, key: str, title: str = "Disk almost full") -> str:
        sent = await self.server.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=key, title=title)
        )
        assert (await self.server.app.dispatcher.run_once()).claimed == 1
        return str(sent.notification_id)

    async def get(self, nid: str) -> t.Notification:
        reply = await self.server.stub("oscar").GetNotification(
            pb.GetNotificationRequest(notification_id=nid)
        )
        return reply.notification

    async def ack_records(self, nid: str) -> list[audit_pb.AckAuditRecord]:
        channel = grpc.aio.insecure_channel(self.server.target)
        try:
            reply = await audit_grpc.AuditServiceStub(channel).ListAckAuditRecords(
                audit_pb.ListAckAuditRecordsRequest(notification_id=nid),
                metadata=(("authorization", f"Bearer {KEYS['oscar']}"),),
            )
        finally:
            await channel.close()
        return list(reply.records)

    async def post(
        self, url: str, params: dict[str, str], *, token: str = TOKEN, signed: bool = True
    ) -> httpx.Response:
        """POST ``params`` to ``url`` (absolute, on the public URL) as Twilio does."""
        headers = {}
        if signed:
            headers["X-Twilio-Signature"] = RequestValidator(token).compute_signature(url, params)
        async with httpx.AsyncClient() as http:
            return await http.post(url, data=params, headers=headers)

    def sms_reply(self, body: str, *, sender: str = ALICE) -> dict[str, str]:
        return {
            "MessageSid": f"SM{next(_SIDS):032x}",
            "AccountSid": SID,
            "From": sender,
            "To": SMS_NUMBER,
            "Body": body,
            "NumMedia": "0",
            "ApiVersion": "2010-04-01",
        }


_SIDS = itertools.count(1)


def _form(request: RecordedRequest) -> dict[str, str]:
    return dict(parse_qsl(request.body.decode(), keep_blank_values=True))


def _answer(request: RecordedRequest) -> Reply:
    """Twilio's 201 with the created resource."""
    prefix = "CA" if request.path.endswith("/Calls.json") else "SM"
    return Reply.json({"sid": f"{prefix}{next(_SIDS):032x}", "status": "queued"}, status=201)


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[TwilioRig]:
    async with HttpReceiver() as rx:
        rx.responder = _answer
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"""
sms:
  type: twilio_sms
  account_sid: {SID}
  auth_token: {TOKEN}
  from: "{SMS_NUMBER}"
  base_url: {rx.url("")}
  notify_outcome: true
phone:
  type: twilio_voice
  account_sid: {SID}
  auth_token: {TOKEN}
  from: "{VOICE_NUMBER}"
  base_url: {rx.url("")}
"""
        )
        server = await start_server(
            db_url,
            tmp_path,
            channels_file=str(channels),
            dispatch_enabled=False,
            http_listen="127.0.0.1:0",
            action_link_keys=LINK_KEY,
        )
        try:
            await put_people(server, {"alice": [("sms", ALICE)], "bob": [("phone", BOB)]})
            for name, who in ((SMS_TYPE, "alice"), (CALL_TYPE, "bob")):
                spec = acked_spec(channels=["log"], targets=[t.Target(recipient_id=who)])
                await put_policy(server, name, spec)
            yield TwilioRig(server, rx)
        finally:
            await server.stop()


def _message(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/xml")
    root = ElementTree.fromstring(response.text)
    return " ".join(e.text or "" for e in root.iter() if e.tag in ("Message", "Say"))


async def _payloads(rig: TwilioRig, nid: str, until: int) -> list[tuple[int, dict[str, object]]]:
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, until),
    )
    return [(e.kind, json_format.MessageToDict(e.payload)) for e in events]


def test_our_signature_is_twilios() -> None:
    """``domain.twilio`` signs as the ``twilio`` package validates (sorted names, every
    value, UTF-8, the query in the URL)."""
    url = "https://uns.example.com/integrations/twilio/voice?channel=phone&ack=a.b-c_d"
    params = {"Digits": "1", "CallSid": "CA1", "From": "+14155552671", "Body": "Ünïcode ✓"}
    ours = twilio_signature(TOKEN, url, params.items())
    validator = RequestValidator(TOKEN)
    assert ours == validator.compute_signature(url, params)
    assert validator.validate(url, params, ours)
    assert not validator.validate(url, params, twilio_signature("other", url, params.items()))


async def test_a_signed_sms_reply_acknowledges_as_the_person_once(rig: TwilioRig) -> None:
    nid = await rig.send(SMS_TYPE, "text-1")
    [sent] = rig.created("Messages")
    assert (sent["To"], sent["From"]) == (ALICE, SMS_NUMBER)
    assert sent["Body"].startswith("Disk almost full\n92% used on db-1\nReply ACK or 1")
    [person] = (await rig.get(nid)).recipients
    [ref] = person.provider_references
    assert (ref.channel, ref.channel_type, ref.recipient) == ("sms", "twilio_sms", f"sms:{ALICE}")

    url = rig.public_url + SMS_PATH
    reply = rig.sms_reply(" ack ")
    answered = await rig.post(url, reply)
    assert _message(answered) == "Acknowledged: Disk almost full"
    replayed = await rig.post(url, reply)
    assert replayed.status_code == 403  # the same webhook again: processed once

    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "recipient:alice")
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.recipient_id, record.via) == (
        "recipient:alice",
        "alice",
        "twilio_sms",
    )
    [acked] = [
        p for k, p in await _payloads(rig, nid, t.EVENT_KIND_ACKED) if k == t.EVENT_KIND_ACKED
    ]
    assert (acked["actor"], acked["via"]) == ("recipient:alice", "twilio_sms")

    # notify_outcome: the loop closes with an outcome SMS to the same number.
    result = await rig.server.app.message_updater.run_once()
    assert (result.done, result.failed) == (1, 0)
    outcome = rig.created("Messages")[-1]
    assert outcome["To"] == ALICE
    assert outcome["Body"].startswith("Disk almost full: Acknowledged by recipient:alice")


async def test_unsigned_or_wrongly_signed_replies_change_nothing(rig: TwilioRig) -> None:
    nid = await rig.send(SMS_TYPE, "text-2")
    url = rig.public_url + SMS_PATH
    other_number = {**rig.sms_reply("ACK"), "To": "+14155550111"}
    refused = [
        await rig.post(url, rig.sms_reply("ACK"), signed=False),
        await rig.post(url, rig.sms_reply("ACK"), token="another-accounts-token"),
        # Signed for another URL (Twilio signs the URL it requested).
        await _signed_for(url + "?x=1", url, rig.sms_reply("ACK")),
        await rig.post(url, other_number),  # no channel has that number
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403]
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_PENDING
    assert not await rig.ack_records(nid)


async def _signed_for(signed_url: str, url: str, params: dict[str, str]) -> httpx.Response:
    signature = RequestValidator(TOKEN).compute_signature(signed_url, params)
    async with httpx.AsyncClient() as http:
        return await http.post(url, data=params, headers={"X-Twilio-Signature": signature})


async def test_several_owed_answers_need_the_code(rig: TwilioRig) -> None:
    first = await rig.send(SMS_TYPE, "text-3", title="Disk almost full")
    second = await rig.send(SMS_TYPE, "text-4", title="Backup failed")
    url = rig.public_url + SMS_PATH

    ambiguous = _message(await rig.post(url, rig.sms_reply("ACK")))
    assert ambiguous.startswith("2 notifications wait for your answer:")
    assert f"{answer_code(first)} Disk almost full" in ambiguous
    assert f"{answer_code(second)} Backup failed" in ambiguous
    help_text = _message(await rig.post(url, rig.sms_reply("what is this?")))
    assert help_text.startswith("Reply ACK or 1 to acknowledge, DISMISS or 2 to dismiss")
    assert not await rig.ack_records(first) and not await rig.ack_records(second)

    answered = _message(await rig.post(url, rig.sms_reply(f"dismiss {answer_code(second)}")))
    assert answered == "Dismissed: Backup failed"
    assert (await rig.get(second)).ack_state == t.ACK_STATE_DISMISSED
    # One owed answer left: a bare "1" settles it.
    assert _message(await rig.post(url, rig.sms_reply("1"))) == "Acknowledged: Disk almost full"
    assert (await rig.get(first)).ack_state == t.ACK_STATE_ACKED
    nothing = _message(await rig.post(url, rig.sms_reply("ACK")))
    assert nothing == "Nothing is waiting for your answer."
    unknown = await rig.post(url, rig.sms_reply("ACK", sender="+14155550123"))
    assert _message(unknown) == ""  # a stranger's number: no answer, no reply


def _call(rig: TwilioRig) -> tuple[str, str]:
    """The last call's Gather action and status callback."""
    call = rig.created("Calls")[-1]
    assert (call["To"], call["From"]) == (BOB, VOICE_NUMBER)
    gather = ElementTree.fromstring(call["Twiml"]).find("Gather")
    assert gather is not None
    said = [say.text for say in gather]
    assert said == ["Disk almost full. 92% used on db-1", "Press 1 to acknowledge, 2 to dismiss."]
    action = gather.get("action") or ""
    assert action.startswith(rig.public_url + "/integrations/twilio/voice?")
    status = call["StatusCallback"]
    assert urlsplit(status).path == VOICE_STATUS_PATH
    return action, status


def _call_params(digits: str | None = None, status: str = "in-progress") -> dict[str, str]:
    params = {
        "CallSid": "CA" + "1" * 32,
        "AccountSid": SID,
        "From": VOICE_NUMBER,
        "To": BOB,
        "CallStatus": status,
        "Direction": "outbound-api",
    }
    if digits is not None:
        params["Digits"] = digits
    return params


@pytest.mark.parametrize(
    ("digit", "state", "kind", "said"),
    [
        ("1", t.ACK_STATE_ACKED, t.EVENT_KIND_ACKED, "Acknowledged: Disk almost full"),
        ("2", t.ACK_STATE_DISMISSED, t.EVENT_KIND_DISMISSED, "Dismissed: Disk almost full"),
    ],
)
async def test_a_key_pressed_on_the_call_settles_as_the_person(
    rig: TwilioRig, digit: str, state: int, kind: int, said: str
) -> None:
    nid = await rig.send(CALL_TYPE, f"call-{digit}")
    action, _status = _call(rig)
    [person] = (await rig.get(nid)).recipients
    [ref] = person.provider_references
    assert (ref.channel_type, ref.recipient, ref.message_id[:2]) == (
        "twilio_voice",
        f"tel:{BOB}",
        "CA",
    )

    assert (await rig.post(action, _call_params("1"), signed=False)).status_code == 403
    assert (await rig.post(action, _call_params("1"), token="wrong")).status_code == 403
    assert (await rig.get(nid)).ack_state == t.ACK_STATE_PENDING
    again = _message(await rig.post(action, _call_params("7")))  # another key: asked again
    assert again == "Press 1 to acknowledge, 2 to dismiss."

    assert _message(await rig.post(action, _call_params(digit))) == said
    assert (await rig.post(action, _call_params(digit))).status_code == 403  # replayed
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (state, "recipient:bob")
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.via) == ("recipient:bob", "twilio_voice")
    [payload] = [p for k, p in await _payloads(rig, nid, kind) if k == kind]
    assert (payload["actor"], payload["via"]) == ("recipient:bob", "twilio_voice")


@pytest.mark.parametrize("how", ["no-answer", "busy", "no-input"])
async def test_a_call_nobody_answers_is_recorded_as_not_reached(rig: TwilioRig, how: str) -> None:
    nid = await rig.send(CALL_TYPE, f"unanswered-{how}")
    action, status = _call(rig)
    if how == "no-input":  # picked up (voicemail, silence), no key: Gather posts no digits
        url, params = action, _call_params("")
    else:
        url, params = status, _call_params(status=how)
    assert (await rig.post(url, params, signed=False)).status_code == 403
    answered = await rig.post(url, params)
    assert answered.status_code == 200
    assert (await rig.post(url, params)).status_code == 403  # replayed: recorded once
    # A final "completed" after a call that was answered is not a failure.
    completed = await rig.post(status, _call_params(status="completed"))
    assert completed.status_code == 200

    await rig.server.stub("alice").WithdrawNotification(
        pb.WithdrawNotificationRequest(notification_id=nid, reason="cleared")
    )
    results = [
        p
        for k, p in await _payloads(rig, nid, t.EVENT_KIND_WITHDRAWN)
        if k == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT and p["channel"] == "phone"
    ]
    assert [r["success"] for r in results] == [True, False]  # taken by Twilio, not reached
    failed = results[1]
    assert (failed["channel"], failed["recipient_id"], failed["not_reached"]) == (
        "phone",
        "bob",
        True,
    )
    assert failed["metadata"] == {"twilio_call_status": how}
    assert "did not reach the person" in str(failed["error"])
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_WITHDRAWN  # not answered: nothing settled by the call

"""Telegram through a real server with its HTTP surface, on SQLite and PostgreSQL (SPEC §7
"People reached anywhere"): a person's message goes to their chat through a recording
fake of the Bot API (``sendMessage`` with Acknowledge / Dismiss / Snooze buttons); the
press Telegram posts to ``/integrations/telegram/{channel}`` with the channel's secret
token settles as the person ``via telegram`` exactly once and is answered with
``answerCallbackQuery``; a missing or wrong secret is refused with nothing changed; when
the obligation ends every message sent through the channel is edited with the outcome
and its buttons removed."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format

from tests.http.conftest import LINK_KEY
from tests.support.grpc_errors import rich_error
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from tests.support.people import acked_spec, operator_stub, put_people, put_policy
from tests.support.server import KEYS, RunningServer, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import audit_service_pb2 as audit_pb
from uns.v1 import audit_service_pb2_grpc as audit_grpc
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import recipient_service_pb2_grpc as rpb_grpc
from uns.v1 import types_pb2 as t

TYPE = "ops.telegram"
SLOW_TYPE = "ops.telegram-and-hook"  # alice's message, and a webhook that never answers
BOT_TOKEN = "7000001:bot-token-for-tests"
SECRET = "telegram-webhook-secret-for-tests"
ALICE_CHAT = 123456789  # her private chat with the bot: her user id
OPS_GROUP = -1005550001
WEBHOOK = "/integrations/telegram/tg"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
OTHER_SECRET = "another-bots-webhook-secret"


@dataclass
class BotApi:
    """The Bot API fake's answers: each sent message gets the next message id."""

    rx: HttpReceiver
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(100))

    def answer(self, request: RecordedRequest) -> Reply:
        method = request.path.rsplit("/", 1)[1]
        if method == "answerCallbackQuery":
            return Reply.json({"ok": True, "result": True})
        body = request.json()
        chat = {"id": int(body["chat_id"]), "type": "private"}
        message_id = next(self.ids) if method == "sendMessage" else body["message_id"]
        return Reply.json(
            {"ok": True, "result": {"message_id": message_id, "date": 1, "chat": chat, "text": ""}}
        )

    def calls(self, method: str) -> list[RecordedRequest]:
        return [r for r in self.rx.requests if r.path == f"/tg/bot{BOT_TOKEN}/{method}"]


@dataclass
class TelegramRig:
    server: RunningServer
    bot: BotApi
    hook: HttpReceiver

    async def accept(self, key: str, notification_type: str = TYPE) -> str:
        sent = await self.server.stub("alice").SendNotification(
            send_request(notification_type=notification_type, idempotency_key=key)
        )
        return str(sent.notification_id)

    async def send(self, key: str) -> str:
        nid = await self.accept(key)
        assert (await self.server.app.dispatcher.run_once()).claimed == 1
        return nid

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
        self, update: Any, secret: str | None = SECRET, path: str = WEBHOOK
    ) -> httpx.Response:
        headers = {} if secret is None else {SECRET_HEADER: secret}
        async with httpx.AsyncClient(base_url=self.server.app.public_url) as http:
            return await http.post(path, json=update, headers=headers)


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[TelegramRig]:
    async with HttpReceiver() as rx, HttpReceiver() as hook:
        bot = BotApi(rx)
        rx.responder = bot.answer
        hook.default = Reply(action="hang")
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"""
tg:
  type: telegram
  bot_token: "{BOT_TOKEN}"
  secret_token: {SECRET}
  base_url: {rx.url("/tg")}
tg-other:
  type: telegram
  bot_token: "7000002:another-bot-token"
  secret_token: {OTHER_SECRET}
  base_url: {rx.url("/tg-other")}
hook:
  type: webhook
  url: {hook.url("/hook")}
  secret: webhook-secret-for-tests
  timeout_seconds: 300
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
            await put_people(
                server, {"alice": [("tg", str(ALICE_CHAT))], "ops": [("tg", str(OPS_GROUP))]}
            )
            targets = [t.Target(recipient_id="alice"), t.Target(recipient_id="ops")]
            await put_policy(server, TYPE, acked_spec(targets=targets))
            slow = acked_spec(channels=["hook"], targets=[t.Target(recipient_id="alice")])
            await put_policy(server, SLOW_TYPE, slow)
            yield TelegramRig(server, bot, hook)
        finally:
            await server.stop()


def _sent_to(rig: TelegramRig, chat: int) -> tuple[RecordedRequest, int]:
    """The last sendMessage to ``chat`` and the message id the fake gave it."""
    sends = rig.bot.calls("sendMessage")
    [index] = [i for i, r in enumerate(sends) if r.json()["chat_id"] == str(chat)][-1:]
    return sends[index], 100 + index


def press(
    send: RecordedRequest,
    message_id: int,
    *,
    dismiss: bool = False,
    snooze: bool = False,
    user_id: int = ALICE_CHAT,
    callback_id: str = "cb-1",
    update_id: int = 1,
) -> dict[str, Any]:
    """The Update Telegram posts when ``user_id`` presses a button of the message."""
    keyboard = send.json()["reply_markup"]["inline_keyboard"]
    [button] = [
        b
        for row in keyboard
        for b in row
        if b["text"] == ("Snooze 30 min" if snooze else "Dismiss" if dismiss else "Acknowledge")
    ]
    chat = int(send.json()["chat_id"])
    return {
        "update_id": update_id,
        "callback_query": {
            "id": callback_id,
            "from": {"id": user_id, "is_bot": False, "first_name": "Alice", "username": "alice_t"},
            "message": {
                "message_id": message_id,
                "date": 1,
                "chat": {"id": chat, "type": "private" if chat > 0 else "supergroup"},
                "text": "...",
            },
            "chat_instance": "-5",
            "data": button["callback_data"],
        },
    }


async def _acked_payloads(rig: TelegramRig, nid: str) -> list[dict[str, Any]]:
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_ACKED),
    )
    return [json_format.MessageToDict(e.payload) for e in events if e.kind == t.EVENT_KIND_ACKED]


async def test_a_press_settles_as_the_person_once_and_every_message_is_edited(
    rig: TelegramRig,
) -> None:
    nid = await rig.send("tg-1")

    # One message per person, to their chat, with the three buttons.
    send, message_id = _sent_to(rig, ALICE_CHAT)
    assert send.path == f"/tg/bot{BOT_TOKEN}/sendMessage"
    assert send.headers["content-type"] == "application/json"
    body = send.json()
    assert body["text"].startswith("Disk almost full")
    buttons = [b for row in body["reply_markup"]["inline_keyboard"] for b in row]
    assert [b["text"] for b in buttons] == ["Acknowledge", "Dismiss", "Snooze 30 min"]
    assert all(
        len(b["callback_data"].encode()) <= 64 and nid in b["callback_data"] for b in buttons
    )
    _group_send, group_message_id = _sent_to(rig, OPS_GROUP)
    n = await rig.get(nid)
    refs = {p.recipient_id: list(p.provider_references) for p in n.recipients}
    [alice_ref] = refs["alice"]
    assert (alice_ref.channel, alice_ref.message_id) == ("tg", str(message_id))

    # alice presses Acknowledge in her chat; Telegram redelivers the same update.
    first = await rig.post(press(send, message_id))
    again = await rig.post(press(send, message_id))
    assert (first.status_code, first.json()) == (200, {"outcome": "settled"})
    assert (again.status_code, again.json()) == (200, {"outcome": "replayed"})
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "recipient:alice")
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.recipient_id, record.via) == (
        "recipient:alice",
        "alice",
        "telegram",
    )
    [payload] = await _acked_payloads(rig, nid)
    assert (payload["actor"], payload["via"]) == ("recipient:alice", "telegram")
    assert payload["metadata"]["telegram_user_id"] == str(ALICE_CHAT)
    # A producer reads the person, never their chat (personal data, issue 42).
    events = await events_until(
        rig.server.stub("alice"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_ACKED),
    )
    seen = json.dumps([json_format.MessageToDict(e.payload) for e in events])
    assert str(ALICE_CHAT) not in seen and str(OPS_GROUP) not in seen
    assert '"telegram_chat_id": "recipient:alice"' in seen

    # The press is answered once (the spinner stops, alice reads the result). A later
    # press's answer is the barrier: a second answer of the first would come before it.
    stray = press(send, message_id + 999, callback_id="cb-2", update_id=2)
    assert (await rig.post(stray)).json() == {"outcome": "invalid"}
    await _answers_until(rig, lambda a: any(x["callback_query_id"] == "cb-2" for x in a))
    answered = [a.json() for a in rig.bot.calls("answerCallbackQuery")]
    assert [a for a in answered if a["callback_query_id"] == "cb-1"] == [
        {"callback_query_id": "cb-1", "text": "Acknowledged."}
    ]

    # The loop closes: both messages edited with the outcome, their buttons removed.
    assert not rig.bot.calls("editMessageText")  # queued, not sent inside the answer
    result = await rig.server.app.message_updater.run_once()
    assert (result.done, result.failed) == (2, 0)
    edits = {
        (e.json()["chat_id"], e.json()["message_id"]): e.json()
        for e in rig.bot.calls("editMessageText")
    }
    assert set(edits) == {(str(ALICE_CHAT), message_id), (str(OPS_GROUP), group_message_id)}
    for edit in edits.values():
        assert edit["reply_markup"] == {"inline_keyboard": []}
        assert edit["text"].startswith("Disk almost full")
        assert "Acknowledged by recipient:alice at " in edit["text"]


async def _answers_until(rig: TelegramRig, done: Any) -> None:
    """Wait (with a deadline) until the answerCallbackQuery calls satisfy ``done``."""
    count = len(rig.bot.rx.requests)
    while not done([a.json() for a in rig.bot.calls("answerCallbackQuery")]):
        count += 1
        await rig.bot.rx.wait_for_requests(count)


async def test_a_group_members_press_answers_as_them_and_a_dismiss_is_told(
    rig: TelegramRig,
) -> None:
    nid = await rig.send("tg-2")
    send, message_id = _sent_to(rig, OPS_GROUP)
    answer = await rig.post(press(send, message_id, dismiss=True, user_id=4242, callback_id="g-1"))
    assert answer.json() == {"outcome": "settled"}
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_DISMISSED, "telegram:4242")
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.via) == ("telegram:4242", "telegram")
    # alice's button now: the obligation has ended, and she is told how.
    alice_send, alice_message = _sent_to(rig, ALICE_CHAT)
    late = await rig.post(press(alice_send, alice_message, callback_id="a-1", update_id=3))
    assert late.json() == {"outcome": "conflict"}
    await _answers_until(rig, lambda a: {x["callback_query_id"] for x in a} >= {"g-1", "a-1"})
    texts = {
        a.json()["callback_query_id"]: a.json()["text"]
        for a in rig.bot.calls("answerCallbackQuery")
    }
    assert texts["g-1"] == "Dismissed."
    assert texts["a-1"].startswith("This notification was already dismissed by telegram:4242")


async def test_the_webhook_refuses_what_it_cannot_verify_and_changes_nothing(
    rig: TelegramRig,
) -> None:
    nid = await rig.send("tg-3")
    send, message_id = _sent_to(rig, ALICE_CHAT)
    update = press(send, message_id)
    missing = await rig.post(update, secret=None)
    wrong = await rig.post(update, secret=SECRET + "x")
    unknown = await rig.post(update, path="/integrations/telegram/no-such-channel")
    assert (missing.status_code, wrong.status_code, unknown.status_code) == (401, 403, 404)
    async with httpx.AsyncClient(base_url=rig.server.app.public_url) as http:
        garbage = await http.post(WEBHOOK, content=b"{not json", headers={SECRET_HEADER: SECRET})
        wrong_shape = await http.post(
            WEBHOOK,
            json={"update_id": 5, "callback_query": {"id": 7}},
            headers={SECRET_HEADER: SECRET},
        )
    assert (garbage.status_code, wrong_shape.status_code) == (400, 400)
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_PENDING
    assert not await rig.ack_records(nid)
    assert not rig.bot.calls("answerCallbackQuery")
    # The press itself, properly signed, still works: nothing was used up.
    assert (await rig.post(update)).json() == {"outcome": "settled"}


async def test_updates_that_are_not_presses_on_uns_messages_settle_nothing(
    rig: TelegramRig,
) -> None:
    nid = await rig.send("tg-4")
    send, message_id = _sent_to(rig, ALICE_CHAT)
    message = {"update_id": 9, "message": {"message_id": 1, "chat": {"id": 1}, "text": "hi"}}
    ignored = await rig.post(message)
    assert (ignored.status_code, ignored.json()) == (200, {"outcome": "ignored"})
    # A button pressed on a message UNS did not send through this channel (another
    # message id, another chat), or data that is not a UNS button.
    other_message = press(send, message_id + 1, callback_id="x-1")
    other_chat = press(send, message_id, callback_id="x-2")
    other_chat["callback_query"]["message"]["chat"]["id"] = 555
    foreign = press(send, message_id, callback_id="x-3")
    foreign["callback_query"]["data"] = "buy:42"
    for update in (other_message, other_chat, foreign):
        assert (await rig.post(update)).json() == {"outcome": "invalid"}
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_PENDING
    assert not await rig.ack_records(nid)
    await _answers_until(rig, lambda a: len(a) == 3)
    texts = {a.json()["text"] for a in rig.bot.calls("answerCallbackQuery")}
    assert texts == {"This button does not answer a notification UNS sent to this chat."}


async def test_a_press_before_its_attempt_is_committed_is_told_to_press_again(
    rig: TelegramRig,
) -> None:
    nid = await rig.accept("tg-5", SLOW_TYPE)
    # alice's message is sent; the attempt waits for the webhook, which never answers.
    delivery = asyncio.create_task(rig.server.app.dispatcher.run_once())
    await rig.hook.wait_for_requests(1)
    [send] = await rig.bot.rx.wait_for_requests(1)
    early = press(send, 100, callback_id="e-1")
    answer = await rig.post(early)
    assert answer.json() == {"outcome": "sending"}
    assert (await rig.post(early)).json() == {"outcome": "replayed"}
    await _answers_until(rig, lambda a: len(a) == 1)
    [told] = rig.bot.calls("answerCallbackQuery")
    assert told.json()["text"] == "UNS is still sending this notification: press again in a moment."
    await rig.hook.stop()  # the webhook's connection drops: the attempt settles
    await delivery
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_UNSPECIFIED and not await rig.ack_records(nid)


async def test_only_the_sending_channels_secret_verifies_its_press(rig: TelegramRig) -> None:
    nid = await rig.send("tg-6")
    send, message_id = _sent_to(rig, ALICE_CHAT)
    update = press(send, message_id)
    # Another Telegram channel's webhook, with that channel's own secret: verified as
    # that channel, whose bot sent nothing for this notification.
    other = await rig.post(update, secret=OTHER_SECRET, path="/integrations/telegram/tg-other")
    crossed = await rig.post(update, secret=OTHER_SECRET)
    assert other.json() == {"outcome": "invalid"} and crossed.status_code == 403
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_PENDING and not await rig.ack_records(nid)


async def test_concurrent_copies_of_a_press_settle_once(rig: TelegramRig) -> None:
    nid = await rig.send("tg-7")
    send, message_id = _sent_to(rig, ALICE_CHAT)
    update = press(send, message_id, callback_id="c-1")
    answers = await asyncio.gather(*(rig.post(update) for _ in range(4)))
    outcomes = sorted(a.json()["outcome"] for a in answers)
    assert outcomes == ["replayed", "replayed", "replayed", "settled"]
    [record] = await rig.ack_records(nid)
    assert record.acked_by == "recipient:alice"


@pytest.mark.parametrize("address", ["alice", "+33612345678", "@abc", "12 34"])
async def test_a_telegram_contact_must_be_a_chat_id(rig: TelegramRig, address: str) -> None:
    person = rpb.Recipient(
        recipient_id="bob",
        display_name="Bob",
        time_zone="UTC",
        contacts=[rpb.Contact(channel="tg", address=address)],
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await operator_stub(rig.server, rpb_grpc.RecipientServiceStub).PutRecipient(
            rpb.PutRecipientRequest(recipient=person)
        )
    err = rich_error(caught.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert "Telegram chat id" in err.violations["recipient.contacts[0].address"]


async def test_the_snooze_button_snoozes_as_the_person_until_an_answer_ends_it(
    rig: TelegramRig,
) -> None:
    """Snooze 30 min (issue 44 item 4): alice's press snoozes as alice ``via`` telegram
    and ``answerCallbackQuery`` says until when; once the group has acknowledged, her
    press changes nothing and she is told who answered."""
    nid = await rig.send("tg-snooze")
    send, message_id = _sent_to(rig, ALICE_CHAT)
    snoozed = await rig.post(press(send, message_id, snooze=True, callback_id="s-1"))
    assert snoozed.json() == {"outcome": "snoozed"}
    n = await rig.get(nid)
    assert n.ack_state == t.ACK_STATE_SNOOZED
    until = n.snooze_until_time.ToDatetime()
    assert until - n.update_time.ToDatetime() == timedelta(minutes=30)
    [record] = await rig.ack_records(nid)
    assert (record.acked_by, record.recipient_id, record.via, record.new_state) == (
        "recipient:alice",
        "alice",
        "telegram",
        t.ACK_STATE_SNOOZED,
    )
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_SNOOZED),
    )
    [payload] = [
        json_format.MessageToDict(e.payload) for e in events if e.kind == t.EVENT_KIND_SNOOZED
    ]
    assert (payload["actor"], payload["via"], payload["duration_seconds"]) == (
        "recipient:alice",
        "telegram",
        1800,
    )

    group_send, group_message_id = _sent_to(rig, OPS_GROUP)
    acked = await rig.post(press(group_send, group_message_id, user_id=4242, callback_id="g-1"))
    assert acked.json() == {"outcome": "settled"}
    late = await rig.post(press(send, message_id, snooze=True, callback_id="s-2", update_id=2))
    assert late.json() == {"outcome": "conflict"}
    n = await rig.get(nid)
    assert (n.ack_state, n.ack_actor) == (t.ACK_STATE_ACKED, "telegram:4242")
    assert [r.new_state for r in await rig.ack_records(nid)] == [
        t.ACK_STATE_SNOOZED,
        t.ACK_STATE_ACKED,
    ]
    await _answers_until(rig, lambda a: {x["callback_query_id"] for x in a} >= {"s-1", "s-2"})
    texts = {
        a.json()["callback_query_id"]: a.json()["text"]
        for a in rig.bot.calls("answerCallbackQuery")
    }
    assert texts["s-1"] == f"Snoozed until {until:%Y-%m-%d %H:%M} UTC; the answer is still owed."
    assert texts["s-2"].startswith("This notification was already acknowledged by telegram:4242")

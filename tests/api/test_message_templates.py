"""Message templates (SPEC §7, issue 45) through a real server on SQLite,
with an ntfy channel and a webhook on a loopback fake that records what
each received: the most specific template per channel type and person's locale (with
the locale falling back by language), a shared channel's message, a render error and
a sandbox escape (the raw text is sent; the attempt says why), refusals at
PutPolicyRevision, Simulate's preview, and the datetime/duration filters in the
person's zone and language."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.support.grpc_errors import rich_error
from tests.support.http_receiver import HttpReceiver, RecordedRequest, Reply
from tests.support.people import operator_stub, put_policy, put_recipients
from tests.support.server import RunningServer, send_request, start_server
from tests.support.watching import events_until, has_kind
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import policy_service_pb2 as ppb
from uns.v1 import policy_service_pb2_grpc as ppb_grpc
from uns.v1 import recipient_service_pb2 as rpb
from uns.v1 import types_pb2 as t

KIND = "db.replica_lag"


def _answer(request: RecordedRequest) -> Reply:
    if request.path == "/ntfy":
        topic = request.json()["topic"]
        return Reply.json({"id": "msg-" + topic, "event": "message", "topic": topic})
    return Reply(status=204)


@dataclass
class Rig:
    server: RunningServer
    rx: HttpReceiver

    def pushes(self) -> dict[str, Any]:
        """ntfy publishes by topic (each person's address)."""
        return {r.json()["topic"]: r.json() for r in self.rx.requests if r.path == "/ntfy"}

    def hooks(self) -> dict[str, Any]:
        """Webhook bodies by recipient ("" for the shared channel's)."""
        out = {}
        for r in self.rx.requests:
            if r.path == "/hook":
                data = r.json()["data"]
                out[data.get("recipient", {}).get("recipient_id", "")] = data
        return out


@pytest.fixture
async def rig(db_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with HttpReceiver() as rx:
        rx.responder = _answer
        channels = tmp_path / "channels.yaml"
        channels.write_text(
            f"push:\n  type: ntfy\n  base_url: {rx.url('/ntfy')}\n"
            f"hook:\n  type: webhook\n  url: {rx.url('/hook')}\n  secret: s\n"
        )
        server = await start_server(
            db_url, tmp_path, channels_file=str(channels), dispatch_enabled=False
        )
        try:
            await put_recipients(
                server,
                [
                    person("amelie", "Amélie Tremblay", "fr-CA", "America/Montreal"),
                    person("bob", "Bob Okafor", "en-GB", "Europe/London"),
                    person("dora", "Dora Díaz", "", "UTC"),
                ],
            )
            yield Rig(server, rx)
        finally:
            await server.stop()


def person(rid: str, name: str, locale: str, zone: str) -> rpb.Recipient:
    return rpb.Recipient(
        recipient_id=rid,
        display_name=name,
        time_zone=zone,
        locale=locale,
        contacts=[
            rpb.Contact(channel="push", address=f"{rid}-phone"),
            rpb.Contact(channel="hook", address=rid),
        ],
    )


TEMPLATES = [
    # 0: ntfy in French (Amélie's fr-CA falls back to it)
    ppb.Template(
        channel_type="ntfy",
        locale="fr",
        title="[{{ metadata.cluster }}] {{ title }}",
        body="Bonjour {{ recipient.display_name }} : {{ message }}"
        " (retard {{ metadata.lag_seconds | duration }})",
    ),
    # 1: ntfy, any language (Bob's en-GB, Dora without one)
    ppb.Template(channel_type="ntfy", title="[{{ metadata.cluster }}] {{ title }}"),
    # 2: any channel type in French (Amélie's webhook)
    ppb.Template(locale="fr", body="{{ message }} — {{ accepted_at | datetime('EEEE') }}"),
    # 3: any channel type, any language (the shared webhook, Bob's and Dora's webhook)
    ppb.Template(
        body="{{ intent }}/{{ source }}: {{ message }}"
        " for {{ recipient.display_name or 'everyone' }}"
    ),
]


def spec(templates: list[ppb.Template] = TEMPLATES, **fields: Any) -> ppb.PolicySpec:
    values: dict[str, Any] = {
        "channels": ["hook"],
        "delivery_mode": t.DELIVERY_MODE_GUARANTEED,
        "targets": [t.Target(recipient_id=r) for r in ("amelie", "bob", "dora")],
        "templates": templates,
    }
    values.update(fields)
    return ppb.PolicySpec(**values)


def request(**fields: Any) -> pb.SendNotificationRequest:
    values: dict[str, Any] = {
        "notification_type": KIND,
        "title": "Replica lag",
        "message": "db-2 is behind",
        "metadata": {"cluster": "prod-eu", "lag_seconds": 330},
    }
    values.update(fields)
    return send_request(**values)


async def deliver(rig: Rig, **fields: Any) -> str:
    sent = await rig.server.stub("alice").SendNotification(request(**fields))
    assert (await rig.server.app.dispatcher.run_once()).claimed == 1
    return str(sent.notification_id)


async def test_the_most_specific_template_wins_per_channel_type_and_locale(rig: Rig) -> None:
    await put_policy(rig.server, KIND, spec())
    await deliver(rig)
    pushes, hooks = rig.pushes(), rig.hooks()
    # ntfy: the French template for fr-CA (by its language), the any-language one else.
    assert pushes["amelie-phone"]["title"] == "[prod-eu] Replica lag"
    assert pushes["amelie-phone"]["message"] == (
        "Bonjour Amélie Tremblay : db-2 is behind (retard 6\xa0minutes)"
    )
    assert (pushes["bob-phone"]["title"], pushes["bob-phone"]["message"]) == (
        "[prod-eu] Replica lag",
        "db-2 is behind",  # template 1 has no body: the raw message
    )
    assert pushes["dora-phone"]["title"] == "[prod-eu] Replica lag"
    # The webhook: any type in French for Amélie, the catch-all for the others.
    assert hooks["amelie"]["message"].startswith("db-2 is behind — ")
    assert hooks["amelie"]["title"] == "Replica lag"
    assert hooks["bob"]["message"] == "WARNING/disk-monitor: db-2 is behind for Bob Okafor"
    assert hooks[""]["message"] == "WARNING/disk-monitor: db-2 is behind for everyone"


async def test_datetime_renders_in_the_persons_zone_and_language(rig: Rig) -> None:
    when = ppb.Template(
        channel_type="ntfy",
        body="{{ metadata.since | datetime('yyyy-MM-dd HH:mm zzzz') }}"
        " / {{ 90 | duration('short') }}",
    )
    await put_policy(rig.server, KIND, spec([when], targets=[t.Target(recipient_id="amelie")]))
    await deliver(rig, metadata={"since": "2026-12-07T04:00:00Z"})
    body = rig.pushes()["amelie-phone"]["message"]
    # 04:00 UTC is 23:00 the evening before in Montréal, named in French.
    assert body.startswith("2026-12-06 23:00 heure normale de l\u2019Est")
    assert body.endswith("2\xa0min")


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("{{ metadata.no_such_key }}", "no_such_key"),
        ("{{ ''.__class__.__mro__ }}", "unsafe"),
        ("{{ range.__globals__ }}", "unsafe"),
        ("{{ 'x' * 10000000 }}", "repetition"),
        ("{{ title | datetime }}", "datetime"),
    ],
)
async def test_a_template_that_fails_sends_the_raw_text_and_says_why(
    rig: Rig, source: str, words: str
) -> None:
    await put_policy(
        rig.server,
        KIND,
        spec(
            [ppb.Template(channel_type="ntfy", title=source)],
            targets=[t.Target(recipient_id="bob")],
        ),
    )
    nid = await deliver(rig)
    push = rig.pushes()["bob-phone"]
    assert (push["title"], push["message"]) == ("Replica lag", "db-2 is behind")
    assert "class" not in push["title"] and "object" not in push["message"]
    events = await events_until(
        rig.server.stub("oscar"),
        pb.WatchEventsRequest(replay_history=True, notification_ids=[nid]),
        has_kind(nid, t.EVENT_KIND_DELIVERY_RESULT),
    )
    results = [e.payload for e in events if e.kind == t.EVENT_KIND_CHANNEL_ATTEMPT_RESULT]
    by_channel = {r["channel"]: r for r in results}
    assert by_channel["push"]["success"] is True
    assert words in by_channel["push"]["metadata"]["template_error"]
    assert "template_error" not in by_channel["hook"]["metadata"]  # no template for it
    got = await rig.server.stub("alice").GetNotification(
        pb.GetNotificationRequest(notification_id=nid)
    )
    assert got.notification.state == t.NOTIFICATION_STATE_DELIVERED


@pytest.mark.parametrize(
    ("template", "field", "words"),
    [
        (ppb.Template(title="{{ title"), "spec.templates[1].title", "does not compile"),
        (ppb.Template(body="{% for x in y %}"), "spec.templates[1].body", "does not compile"),
        (ppb.Template(locale="klingon", body="x"), "spec.templates[1].locale", "BCP 47"),
        (ppb.Template(channel_type="ntfy"), "spec.templates[1].body", "title or a body"),
        (ppb.Template(body="x" * 8001), "spec.templates[1].body", "at most 8000"),
        (
            ppb.Template(channel_type="ntfy", locale="FR", body="x"),
            "spec.templates[1]",
            "same channel_type",
        ),
    ],
)
async def test_a_template_that_does_not_compile_is_refused_on_its_field(
    rig: Rig, template: ppb.Template, field: str, words: str
) -> None:
    first = ppb.Template(channel_type="ntfy", locale="fr", title="{{ title }}")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await operator_stub(rig.server, ppb_grpc.PolicyServiceStub).PutPolicyRevision(
            ppb.PutPolicyRevisionRequest(notification_type=KIND, spec=spec([first, template]))
        )
    err = rich_error(info.value)
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
    assert list(err.violations) == [field]
    assert words in err.violations[field]


async def test_simulate_renders_each_persons_message_on_each_channel(rig: Rig) -> None:
    revision = await put_policy(
        rig.server,
        KIND,
        spec(
            require_ack=True,
            ack_timeout_minutes=60,
            reminder=t.Reminder(first_after={"seconds": 600}, max_count=1),
        ),
    )
    assert revision.spec.templates[0].locale == "fr"
    reply = await rig.server.stub("alice").Simulate(pb.SimulateRequest(request=request()))
    delivery, reminder = reply.planned_steps[0], reply.planned_steps[1]
    assert reminder.kind == pb.PLANNED_STEP_KIND_REMINDER
    shown = {(m.channel, m.recipient_id): m for m in delivery.messages}
    assert set(shown) == {
        ("hook", ""),
        *((c, r) for c in ("push", "hook") for r in ("amelie", "bob", "dora")),
    }
    amelie = shown[("push", "amelie")]
    assert (amelie.channel_type, amelie.locale, amelie.template_index) == ("ntfy", "fr-CA", 0)
    assert amelie.body == "Bonjour Amélie Tremblay : db-2 is behind (retard 6\xa0minutes)"
    assert shown[("hook", "")].body == "WARNING/disk-monitor: db-2 is behind for everyone"
    assert shown[("hook", "")].template_index == 3
    bob_reminder = {(m.channel, m.recipient_id): m for m in reminder.messages}[("push", "bob")]
    assert bob_reminder.title == "Reminder 1: [prod-eu] Replica lag"
    assert [s.messages for s in reply.planned_steps if s.kind == pb.PLANNED_STEP_KIND_DEADLINE] == [
        []
    ]
    # A render error shows in the preview before the revision is ever activated.
    await put_policy(rig.server, KIND, spec([ppb.Template(title="{{ nope }}")]))
    broken = await rig.server.stub("alice").Simulate(pb.SimulateRequest(request=request()))
    first = broken.planned_steps[0].messages[0]
    assert (first.title, first.HasField("template_index")) == ("Replica lag", False)
    assert "nope" in first.template_error

"""Provider callbacks: ``POST /integrations/slack/interactions`` and
``POST /integrations/pagerduty/webhook``.

The signature over the raw body is checked first (``domain.signatures``), then again
with only the secret of the channel that posted the message (Slack: the Slack channels
whose messages UNS recorded for the notification, never the payload's ``channel``) or
opened the incident (PagerDuty); a bad or stale signature, another channel's, or a request
already accepted once (a replay: its receipt is written in the transaction that
settles it, so concurrent copies go on once, and a callback whose settle failed is
served again when the provider retries it) is 401 and changes nothing. A signed payload of the
wrong shape or types (``domain.callback_payloads``) is 400 and changes nothing. A
verified callback is answered 200 whatever it settles (conflicts and late answers
included), so the provider does not retry a decision. A Slack Snooze press that
snoozed replaces the pressed message (its ``response_url``) with one saying until
when, its buttons still there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from uns_server.domain.callback_payloads import (
    MalformedCallback,
    SlackInteraction,
    pagerduty_event,
    slack_interaction,
)
from uns_server.domain.signatures import verify_pagerduty, verify_slack
from uns_server.services.acks import Receipt
from uns_server.services.provider_answers import (
    REPLAYED,
    Pressed,
    ProviderAnswers,
    Snoozed,
    receipt_digest,
)

log = logging.getLogger("uns.callbacks")


def _refused() -> web.Response:
    return web.Response(status=401, text="invalid signature\n")


def _malformed(what: str) -> web.Response:
    return web.Response(status=400, text=f"expected {what}\n")


def _slack_signed_by(
    secrets: Mapping[str, str], channels: Sequence[str] | None, request: web.Request, body: bytes
) -> bool:
    """Verified with the secret of one of ``channels`` (all Slack channels if None)."""
    chosen = (
        list(secrets.values())
        if channels is None
        else [secrets[c] for c in channels if c in secrets]
    )
    return verify_slack(
        chosen,
        request.headers.get("X-Slack-Request-Timestamp"),
        request.headers.get("X-Slack-Signature"),
        body,
        time.time(),
    )


def _slack_payload(body: bytes) -> SlackInteraction | None:
    """The ``block_actions`` interaction (None for another kind, which is ignored);
    ``MalformedCallback`` when the form or its payload is not one Slack sends."""
    try:
        payload: Any = json.loads(parse_qs(body.decode())["payload"][0])
    except (KeyError, IndexError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise MalformedCallback("a form field 'payload' holding JSON") from exc
    return slack_interaction(payload)


# ``reply(response_url, text, posters)``: the Slack channel that posted answers ephemerally.
EphemeralReply = Callable[[str, str, Sequence[str] | None], Coroutine[Any, Any, None]]
# ``show(response_url, snoozed, posters)``: that channel replaces the pressed message.
SnoozedReply = Callable[[str, Snoozed, Sequence[str] | None], Coroutine[Any, Any, None]]


def routes(
    answers: ProviderAnswers,
    slack_secrets: Mapping[str, str],
    pagerduty_secrets: Mapping[str, str],
    reply: EphemeralReply | None = None,
    show_snoozed: SnoozedReply | None = None,
) -> list[web.RouteDef]:
    """``*_secrets``: channel name -> its signing secret. A callback verifies only with
    the secret of the channel that posted the message or opened the incident."""
    replies: set[asyncio.Task[None]] = set()

    def later(call: Coroutine[Any, Any, None]) -> None:
        # After the 200: Slack wants the interaction answered within three seconds.
        task = asyncio.create_task(call)
        replies.add(task)
        task.add_done_callback(replies.discard)

    async def tell(url: str, pressed: Pressed, posters: Sequence[str] | None) -> None:
        """Tell the presser of a button of an obligation that has ended (only they see
        it); show a snooze on the message whose Snooze button was pressed."""
        if not url:
            return
        if reply is not None and pressed.note is not None:
            later(reply(url, pressed.note, posters))
        if show_snoozed is not None and pressed.snoozed is not None:
            later(show_snoozed(url, pressed.snoozed, posters))

    async def slack(request: web.Request) -> web.Response:
        if not slack_secrets:
            raise web.HTTPNotFound()
        body = await request.read()
        if not _slack_signed_by(slack_secrets, None, request, body):
            return _refused()
        try:
            payload = _slack_payload(body)
        except MalformedCallback:
            return _malformed("a form field 'payload' with a block_actions payload")
        if payload is None:
            return web.Response(text="")  # another kind of interaction: nothing to do
        targets = []
        posters: list[str] | None = None
        for action in payload.actions:
            target = await answers.slack_target(action.action_id, action.value)
            if target is not None:
                # Only the Slack channels UNS recorded posting this notification's
                # messages may sign a press on one of its buttons; the payload's
                # ``channel`` is the presser's claim, not evidence.
                posters = await answers.slack_posters(target.notification_id)
                if not _slack_signed_by(slack_secrets, posters, request, body):
                    return _refused()
            targets.append(target)
        signature = request.headers.get("X-Slack-Signature", "")
        receipt: Receipt | None = Receipt(receipt_digest("slack", signature.encode()), "slack")
        if receipt is not None and all(target is None for target in targets):
            if not await answers.claim(receipt):
                return _refused()
            receipt = None
        outcomes = []
        for target in targets:
            if target is None:
                outcomes.append("invalid")
                continue
            # The receipt rides in the first settle's transaction (Slack sends one
            # action per interaction).
            pressed = await answers.slack_action(target, payload.user, receipt)
            if pressed.outcome == REPLAYED:
                return _refused()
            receipt = None
            await tell(payload.response_url, pressed, posters)
            outcomes.append(pressed.outcome)
        log.info("slack interaction", extra={"outcomes": outcomes})
        return web.Response(text="")

    async def pagerduty(request: web.Request) -> web.Response:
        if not pagerduty_secrets:
            raise web.HTTPNotFound()
        body = await request.read()
        header = request.headers.get("X-PagerDuty-Signature")
        if not verify_pagerduty(list(pagerduty_secrets.values()), header, body):
            return _refused()
        try:
            event = pagerduty_event(json.loads(body))
        except (ValueError, RecursionError):  # MalformedCallback is a ValueError
            return _malformed("a v3 webhook envelope")
        incident = None if event is None else await answers.pagerduty_incident(event)
        if incident is not None:
            own = [pagerduty_secrets[c] for c in incident.channels if c in pagerduty_secrets]
            if not verify_pagerduty(own, header, body):
                return _refused()  # signed by another channel's subscription
        receipt = Receipt(receipt_digest("pagerduty", body), "pagerduty")
        if incident is None or event is None:
            if not await answers.claim(receipt):
                return _refused()
            outcome = "ignored"
        else:
            outcome = await answers.pagerduty_event(incident, event, receipt)
            if outcome == REPLAYED:
                return _refused()
        log.info("pagerduty webhook", extra={"outcome": outcome})
        return web.json_response({"outcome": outcome})

    return [
        web.post("/integrations/slack/interactions", slack),
        web.post("/integrations/pagerduty/webhook", pagerduty),
    ]

"""Provider callbacks: ``POST /integrations/slack/interactions`` and
``POST /integrations/pagerduty/webhook``.

The signature over the raw body is checked first (``domain.signatures``), then again
with only the secret of the channel that posted the message (Slack) or opened the
incident (PagerDuty); a bad or stale signature, another channel's, or a request
already accepted once (a replay: its receipt is written in the transaction that
settles it, so concurrent copies go on once, and a callback whose settle failed is
served again when the provider retries it) is 401 and changes nothing. A signed payload of the
wrong shape is 400 and changes nothing. A verified callback is answered 200 whatever
it settles (conflicts and late answers included), so the provider does not retry a
decision.
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

from uns_server.domain.signatures import verify_pagerduty, verify_slack
from uns_server.services.acks import Receipt
from uns_server.services.provider_answers import REPLAYED, ProviderAnswers, receipt_digest

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


def _slack_payload(body: bytes) -> dict[str, Any] | None:
    """A ``block_actions`` payload of the expected shape (others are ignored: {}); None
    when malformed."""
    try:
        payload: Any = json.loads(parse_qs(body.decode())["payload"][0])
    except (KeyError, IndexError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    if payload.get("type") != "block_actions":
        return {}
    actions, user, channel = (payload.get(k) for k in ("actions", "user", "channel"))
    if not isinstance(actions, list) or not all(isinstance(a, dict) for a in actions):
        return None
    if not isinstance(user, dict) or not isinstance(channel, dict | None):
        return None
    for action in actions:
        if not all(isinstance(action.get(k, ""), str) for k in ("action_id", "value")):
            return None
    return payload


# ``reply(response_url, text, posters)``: the Slack channel that posted answers ephemerally.
EphemeralReply = Callable[[str, str, Sequence[str] | None], Coroutine[Any, Any, None]]


def routes(
    answers: ProviderAnswers,
    slack_secrets: Mapping[str, str],
    pagerduty_secrets: Mapping[str, str],
    reply: EphemeralReply | None = None,
) -> list[web.RouteDef]:
    """``*_secrets``: channel name -> its signing secret. A callback verifies only with
    the secret of the channel that posted the message or opened the incident."""
    replies: set[asyncio.Task[None]] = set()

    async def tell_stale(
        payload: Mapping[str, Any], note: str | None, posters: Sequence[str] | None
    ) -> None:
        """Tell the presser of a button of an obligation that has ended (only they see it)."""
        url = payload.get("response_url")
        if reply is None or note is None or not isinstance(url, str) or not url:
            return
        # After the 200: Slack wants the interaction answered within three seconds.
        task = asyncio.create_task(reply(url, note, posters))
        replies.add(task)
        task.add_done_callback(replies.discard)

    async def slack(request: web.Request) -> web.Response:
        if not slack_secrets:
            raise web.HTTPNotFound()
        body = await request.read()
        if not _slack_signed_by(slack_secrets, None, request, body):
            return _refused()
        payload = _slack_payload(body)
        if payload is None:
            return _malformed("a form field 'payload' with a block_actions payload")
        targets = []
        channel = payload.get("channel") or {}
        posters: list[str] | None = None
        for action in payload.get("actions", []):
            target = await answers.slack_target(
                action.get("action_id", ""), action.get("value", "")
            )
            if target is not None:
                posters = await answers.posted_by(
                    target.notification_id, "slack_channel", str(channel.get("id", ""))
                )
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
            pressed = await answers.slack_action(target, payload.get("user", {}), receipt)
            if pressed.outcome == REPLAYED:
                return _refused()
            receipt = None
            await tell_stale(payload, pressed.note, posters)
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
            envelope: Any = json.loads(body)
            event = envelope["event"]
            assert isinstance(event, dict)
        except (ValueError, KeyError, TypeError, AssertionError):
            return _malformed("a v3 webhook envelope")
        incident = await answers.pagerduty_incident(event)
        if incident is not None:
            own = [pagerduty_secrets[c] for c in incident.channels if c in pagerduty_secrets]
            if not verify_pagerduty(own, header, body):
                return _refused()  # signed by another channel's subscription
        receipt = Receipt(receipt_digest("pagerduty", body), "pagerduty")
        if incident is None:
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

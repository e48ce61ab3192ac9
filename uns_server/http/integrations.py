"""Provider callbacks: ``POST /integrations/slack/interactions`` and
``POST /integrations/pagerduty/webhook``.

The signature over the raw body is checked first (``domain.signatures``); a bad or
stale signature, or a request already accepted once (a replay), is 401 and changes
nothing. A verified callback is answered 200 whatever it settles (conflicts and late
answers included), so the provider does not retry a decision.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from uns_server.domain.signatures import verify_pagerduty, verify_slack
from uns_server.services.provider_answers import ProviderAnswers, receipt_digest

log = logging.getLogger("uns.callbacks")


def _refused() -> web.Response:
    return web.Response(status=401, text="invalid signature\n")


def routes(
    answers: ProviderAnswers,
    slack_secrets: Sequence[str],
    pagerduty_secrets: Sequence[str],
) -> list[web.RouteDef]:
    async def slack(request: web.Request) -> web.Response:
        if not slack_secrets:
            raise web.HTTPNotFound()
        body = await request.read()
        signature = request.headers.get("X-Slack-Signature")
        timestamp = request.headers.get("X-Slack-Request-Timestamp")
        if not verify_slack(slack_secrets, timestamp, signature, body, time.time()):
            return _refused()
        assert signature is not None
        digest = receipt_digest("slack", signature.encode())
        if await answers.replayed(digest):
            return _refused()
        try:
            payload: Any = json.loads(parse_qs(body.decode())["payload"][0])
        except (KeyError, IndexError, ValueError, UnicodeDecodeError):
            return web.Response(status=400, text="expected a form field 'payload'\n")
        outcomes = []
        if isinstance(payload, dict) and payload.get("type") == "block_actions":
            user = payload.get("user")
            user = user if isinstance(user, dict) else {}
            for action in payload.get("actions") or []:
                if isinstance(action, dict):
                    outcomes.append(
                        await answers.slack_action(
                            str(action.get("action_id", "")), str(action.get("value", "")), user
                        )
                    )
        await answers.remember(digest, "slack")
        log.info("slack interaction", extra={"outcomes": outcomes})
        return web.Response(text="")

    async def pagerduty(request: web.Request) -> web.Response:
        if not pagerduty_secrets:
            raise web.HTTPNotFound()
        body = await request.read()
        if not verify_pagerduty(
            pagerduty_secrets, request.headers.get("X-PagerDuty-Signature"), body
        ):
            return _refused()
        digest = receipt_digest("pagerduty", body)
        if await answers.replayed(digest):
            return _refused()
        try:
            envelope: Any = json.loads(body)
            event = envelope["event"]
            assert isinstance(event, dict)
        except (ValueError, KeyError, TypeError, AssertionError):
            return web.Response(status=400, text="expected a v3 webhook envelope\n")
        outcome = await answers.pagerduty_event(event)
        await answers.remember(digest, "pagerduty")
        log.info("pagerduty webhook", extra={"outcome": outcome})
        return web.json_response({"outcome": outcome})

    return [
        web.post("/integrations/slack/interactions", slack),
        web.post("/integrations/pagerduty/webhook", pagerduty),
    ]

"""Telegram's webhook: ``POST /integrations/telegram/{channel name}``.

Each ``telegram`` channel has its own URL, given to Telegram with ``setWebhook``
together with the channel's ``secret_token``, which Telegram sends back in
``X-Telegram-Bot-Api-Secret-Token`` on every update. A name that is not a Telegram
channel is 404; a missing header 401, a wrong one 403 (compared in constant time, with
that channel's secret only), changing nothing. A verified update that is not JSON of
the Bot API's shape is 400. Every other verified update is answered 200, so Telegram
does not redeliver a decision: a button press (``callback_query``) is settled
(``services.telegram_answers``) and answered with ``answerCallbackQuery`` after the
200; any other update (a message, an edit) is ignored; a press processed before (the
same callback redelivered) changes nothing and is not answered again.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from uns_server.domain.telegram_updates import telegram_press
from uns_server.services.provider_answers import REPLAYED
from uns_server.services.telegram_answers import TelegramAnswers

log = logging.getLogger("uns.callbacks")
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"

# ``answer(callback_query_id, text)`` through the channel's bot.
AnswerCallback = Callable[[str, str], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class TelegramWebhook:
    """One ``telegram`` channel's webhook: its secret token and its bot's
    ``answerCallbackQuery``."""

    secret_token: str
    answer: AnswerCallback


def routes(answers: TelegramAnswers, webhooks: Mapping[str, TelegramWebhook]) -> list[web.RouteDef]:
    """``webhooks``: channel name -> its webhook (no route answers for other names)."""
    answering: set[asyncio.Task[None]] = set()

    def answer_later(webhook: TelegramWebhook, callback_id: str, text: str) -> None:
        # After the 200: the presser's spinner stops when answered, and the update
        # itself must not wait on a second call to the Bot API.
        task = asyncio.create_task(webhook.answer(callback_id, text))
        answering.add(task)
        task.add_done_callback(answering.discard)

    async def update(request: web.Request) -> web.Response:
        channel = request.match_info["channel"]
        webhook = webhooks.get(channel)
        if webhook is None:
            raise web.HTTPNotFound()
        given = request.headers.get(SECRET_HEADER)
        if given is None:
            return web.Response(status=401, text="missing secret token\n")
        if not hmac.compare_digest(given.encode(), webhook.secret_token.encode()):
            return web.Response(status=403, text="invalid secret token\n")
        try:
            press = telegram_press(json.loads(await request.read()))
        except (ValueError, RecursionError):  # MalformedCallback is a ValueError
            return web.Response(status=400, text="expected a Telegram Update\n")
        if press is None:
            return web.json_response({"outcome": "ignored"})
        answered = await answers.telegram_press(channel, press)
        if answered.outcome != REPLAYED:
            answer_later(webhook, press.callback_id, answered.text)
        log.info("telegram press", extra={"channel": channel, "outcome": answered.outcome})
        return web.json_response({"outcome": answered.outcome})

    return [web.post("/integrations/telegram/{channel}", update)]

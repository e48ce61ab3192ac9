"""Telegram's side of a button press: the ``callback_data`` UNS puts on a button, and
the ``Update`` Telegram posts to the webhook when someone presses it.

``callback_data`` is at most 64 bytes (Bot API): ``uns:ack:<notification id>``,
``uns:dis:<notification id>`` or ``uns:snz:<notification id>`` (Snooze 30 min; 44 bytes
with a UUID). It names the notification and the answer, nothing more: who answers and
whether the message is one UNS sent are read from the ``callback_query`` Telegram's
servers fill in (``from``, and ``message``'s chat and message id, checked against the
references UNS recorded), never from the data.

A parsed press has every field UNS reads type-checked (``MalformedCallback`` otherwise): the
webhook's secret token says the update came from Telegram, not that its fields have the
types the Bot API documents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from uns_server.domain.callback_payloads import MalformedCallback
from uns_server.domain.fields import has_lone_surrogate, text_problems

CALLBACK_DATA_MAX_BYTES = 64
_PREFIX = "uns:"
# The answers a button gives (``callback_data``'s middle part).
ACK, DISMISS, SNOOZE = "ack", "dis", "snz"
_DATA = re.compile(
    r"uns:(ack|dis|snz):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
)
_ID_MAX_CHARS = 255
# Telegram's ids are integers of at most 52 significant bits (chats, users, messages).
_ID_BOUND = 1 << 63


def callback_data(notification_id: str, answer: str) -> str:
    """The data of the button of ``notification_id`` that gives ``answer`` (``ACK``,
    ``DISMISS`` or ``SNOOZE``)."""
    assert answer in (ACK, DISMISS, SNOOZE), answer
    data = f"{_PREFIX}{answer}:{notification_id}"
    assert len(data.encode()) <= CALLBACK_DATA_MAX_BYTES, data
    return data


def parse_callback_data(data: str) -> tuple[str, str] | None:
    """``(notification id, answer)`` of a button UNS made; None for any other data."""
    found = _DATA.fullmatch(data)
    if found is None:
        return None
    return found.group(2), found.group(1)


@dataclass(frozen=True)
class TelegramPress:
    """A ``callback_query``: who pressed (``user_id``, their ``@username`` or ""), on
    which message (``chat_id``, ``message_id``; 0 when Telegram sent no message, as
    for a message sent in inline mode), with which ``data``."""

    update_id: int
    callback_id: str
    user_id: int
    username: str
    chat_id: int
    message_id: int
    data: str


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedCallback(f"{what} must be an object")
    return value


def _integer(container: dict[str, Any], key: str) -> int:
    value = container.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not -_ID_BOUND < value < _ID_BOUND:
        raise MalformedCallback(f"{key} must be an integer")
    return value


def _text(container: dict[str, Any], key: str, *, required: bool = False) -> str:
    value = container.get(key)
    if value is None and not required:
        return ""
    if (
        not isinstance(value, str)
        or text_problems(value, _ID_MAX_CHARS, required=required)
        or has_lone_surrogate(value)
    ):
        raise MalformedCallback(f"{key} must be text of at most {_ID_MAX_CHARS} characters")
    return value


def telegram_press(update: Any) -> TelegramPress | None:
    """The button press an ``Update`` carries; None for any other update (a message,
    an edit, a member change: UNS ignores those); ``MalformedCallback`` when it is not one
    Telegram could have sent."""
    update = _object(update, "the update")
    update_id = _integer(update, "update_id")
    if update.get("callback_query") is None:
        return None
    query = _object(update["callback_query"], "callback_query")
    user = _object(query.get("from"), "callback_query.from")
    chat_id = message_id = 0
    if query.get("message") is not None:
        message = _object(query["message"], "callback_query.message")
        chat_id = _integer(_object(message.get("chat"), "callback_query.message.chat"), "id")
        message_id = _integer(message, "message_id")
    return TelegramPress(
        update_id,
        _text(query, "id", required=True),
        _integer(user, "id"),
        _text(user, "username"),
        chat_id,
        message_id,
        _text(query, "data"),
    )

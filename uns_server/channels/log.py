"""The ``log`` channel: one structured log line per notification, for local use and tests.

It always "delivers" (writing a log record is the whole contract), so a development setup
can exercise dispatch, acknowledgement and WatchEvents without any provider. The record's
message is ``uns notification <title>``; the notification's fields are the record's own
fields (``notification_id``, ``channel``, ``links``, ...), so the JSON formatter writes
them as JSON fields and the text formatter as ``key=value`` (no JSON string inside JSON).
"""

from __future__ import annotations

import logging
import uuid

from uns_server.channels.base import ChannelResult, OutboundMessage
from uns_server.channels.config import LogConfig

LOGGER_NAME = "uns.channels.log"
logger = logging.getLogger(LOGGER_NAME)
# LogRecord attributes a field may not overwrite (``message`` is the formatted text).
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class LogChannel:
    """Writes each notification to the ``uns.channels.log`` logger."""

    def __init__(self, name: str = "log", config: LogConfig | None = None) -> None:
        self.name = name
        level_name = (config or LogConfig()).level
        self._level = logging.getLevelNamesMapping()[level_name]

    async def send(self, message: OutboundMessage) -> ChannelResult:
        message_id = str(uuid.uuid4())
        record = {
            "channel": self.name,
            "message_id": message_id,
            "notification_id": message.notification_id,
            "notification_type": message.notification_type,
            "intent": message.intent,
            "priority": message.priority,
            "title": message.title,
            "message": message.message,
            "source": message.source,
            "correlation_id": message.correlation_id,
            "metadata": dict(message.metadata),
            "attempt": message.attempt,
        }
        if message.recipient_id:
            record["recipient_id"] = message.recipient_id
            record["address"] = message.to
        links = message.action_links(f"log:{self.name}")
        if links is not None:  # local use: the links to click are in the log
            record["links"] = {"acknowledge": links.acknowledge_url, "dismiss": links.dismiss_url}
        fields = {f"uns_{k}" if k in _RESERVED else k: v for k, v in record.items()}
        logger.log(
            self._level,
            "uns notification %s",
            message.title,
            extra=fields,
        )
        return ChannelResult.delivered(
            message_id,
            metadata={"logger": LOGGER_NAME},
            reference={"type": "log", "recipient": f"log:{self.name}"},
        )

    async def aclose(self) -> None:
        """Nothing to release."""

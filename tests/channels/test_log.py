"""The log channel: one structured line on ``uns.channels.log``, always delivered."""

from __future__ import annotations

import json
import logging
import uuid

import pytest

from tests.channels.conftest import make_message
from uns_server.channels.config import LogConfig
from uns_server.channels.log import LogChannel
from uns_server.logs import JsonFormatter, TextFormatter


async def test_writes_one_record_with_fields_and_delivers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="uns.channels.log")
    result = await LogChannel().send(make_message())
    assert result.success and result.message_id
    uuid.UUID(result.message_id)
    [record] = [r for r in caplog.records if r.name == "uns.channels.log"]
    assert record.levelno == logging.INFO
    assert record.getMessage() == f"uns notification {make_message().title}"
    # The notification's fields are the record's fields: JSON fields, not a JSON string.
    line = json.loads(JsonFormatter().format(record))
    assert line["message_id"] == result.message_id
    assert line["notification_id"] == make_message().notification_id
    assert line["metadata"] == {"cell": 7, "tags": ["arm", "torque"]}
    assert line["uns_message"] == make_message().message  # `message` is the log text
    assert line["message"] == record.getMessage()
    text = TextFormatter().format(record)
    assert f"notification_id={make_message().notification_id}" in text
    assert 'metadata={"cell":7,"tags":["arm","torque"]}' in text


async def test_level_is_configurable_and_ids_are_unique(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="uns.channels.log")
    channel = LogChannel("audit-log", LogConfig(level="WARNING"))
    first, second = await channel.send(make_message()), await channel.send(make_message())
    assert first.message_id != second.message_id
    assert {r.levelno for r in caplog.records if r.name == "uns.channels.log"} == {logging.WARNING}
    assert channel.name == "audit-log"
    await channel.aclose()

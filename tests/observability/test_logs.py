"""Log formats: text lines keep every structured field as ``key=value``."""

from __future__ import annotations

import json
import logging
import sys

from uns_server.logs import JsonFormatter, TextFormatter


def record(**fields: object) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": "uns.dispatch", "levelname": "WARNING", "msg": "delivery attempt settled"} | fields
    )


def test_text_lines_carry_the_same_fields_as_json() -> None:
    r = record(notification_id="n-1", attempt=2, error="HTTP 503: try later", tags=["a", "b"])
    text = TextFormatter().format(r)
    assert text.endswith(
        "WARNING uns.dispatch delivery attempt settled notification_id=n-1 attempt=2 "
        'error="HTTP 503: try later" tags=["a","b"]'
    )
    line = json.loads(JsonFormatter().format(r))
    assert {k: line[k] for k in ("notification_id", "attempt", "error")} == {
        "notification_id": "n-1",
        "attempt": 2,
        "error": "HTTP 503: try later",
    }


def test_text_line_without_fields_is_the_plain_line_and_quotes_empty_and_equals() -> None:
    assert TextFormatter().format(record()).endswith("delivery attempt settled")
    assert TextFormatter().format(record(a="", b="x=y")).endswith(' a="" b="x=y"')


def test_traceback_stays_after_the_fields() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        r = record(channel="slack", exc_info=sys.exc_info())
    first, *rest = TextFormatter().format(r).splitlines()
    assert first.endswith("channel=slack") and rest[-1] == "RuntimeError: boom"

"""Structured logs: one JSON object per line, or text for humans with the same fields
appended as ``key=value``.

Extra fields passed with ``extra={...}`` (notification_id, channel, ...) are kept, and
``TraceContextFilter`` adds the current OpenTelemetry ``trace_id``/``span_id``.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

_STANDARD = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` (W3C hex) of the current span, if any, so a log
    line can be found from a trace and the other way round."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            record.span_id = format(ctx.span_id, "016x")
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """The ``extra={...}`` fields of a record (and the trace ids), in the order given."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message key=value ...``: the same fields as the JSON lines, so
    a human reading ``--log-format text`` loses nothing. A value with spaces, quotes or
    ``=`` is JSON-quoted; a dict or list is compact JSON."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = " ".join(f"{k}={_text_value(v)}" for k, v in _fields(record).items())
        if not pairs:
            return line
        head, sep, tail = line.partition("\n")  # an exception's traceback stays last
        return f"{head} {pairs}{sep}{tail}"


def _text_value(value: Any) -> str:
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
    text = str(value)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class FixedFields(logging.Filter):
    """Adds the same fields to every record: which child of ``uns-server --processes N``
    wrote a line, since the children share the supervisor's stderr."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__()
        self._fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self._fields.items():
            setattr(record, key, value)
        return True


def configure(level: str, fmt: str, fields: dict[str, Any] | None = None) -> None:
    """Log to stderr at ``level`` in ``fmt``; ``fields`` are added to every line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(TraceContextFilter())
    if fields:
        handler.addFilter(FixedFields(fields))
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

"""Keeping credentials out of results and logs.

Adapters build their error strings themselves and never put a URL, header or exception
text with a secret in them on purpose; this module is the second line: every result is
scrubbed for the adapter's secrets (and their URL-encoded forms) before it leaves, and the
HTTP library's own loggers are filtered, because its messages may quote a URL or a header,
and a Slack incoming-webhook URL *is* a credential.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, quote_plus, urlsplit

from uns_server.channels.base import ChannelResult

MASK = "***"

# aiohttp's loggers a client request can reach (the others serve its web server).
HTTP_LIBRARY_LOGGERS = ("aiohttp.client", "aiohttp.internal")


def secret_variants(secrets: Iterable[str]) -> tuple[str, ...]:
    """Each secret as it may appear in text: raw, and percent-encoded as in a URL.

    Longest first, so a secret that contains another is masked whole.
    """
    out: set[str] = set()
    for secret in secrets:
        if secret:
            out.update({secret, quote(secret, safe=""), quote(secret), quote_plus(secret)})
    return tuple(sorted(out, key=len, reverse=True))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of every secret replaced by ``***``."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


def redact_url(url: str) -> str:
    """Scheme, host and port only: paths and queries of webhook URLs carry credentials."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return MASK
    if not parts.scheme or not host:
        return MASK
    tail = f"/{MASK}" if (parts.path not in ("", "/") or parts.query) else ""
    return f"{parts.scheme}://{host}{port}{tail}"


_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint(url: str, port: int | None = None) -> str:
    """``host:port`` of a provider's URL (the scheme's default port when none is
    written) or of a bare host and ``port``: where it is, never its path, query or
    user, which may be credentials.
    What the console shows an operator of a channel (docs/console.md)."""
    if "//" not in url:  # a bare host name or address (SMTP)
        host = url.strip("[]")
    else:
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
            port = port or parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
        except ValueError:
            return ""
    if not host or any(c.isspace() for c in host):
        return ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def _scrub_value(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, Mapping):
        return {k: _scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_scrub_value(v, secrets) for v in value]
    return value


def scrub_result(result: ChannelResult, secrets: tuple[str, ...]) -> ChannelResult:
    """The same result with secrets masked in ``error``, ``message_id``, ``metadata``
    and ``reference``."""
    if not secrets:
        return result
    return replace(
        result,
        error=None if result.error is None else redact(result.error, secrets),
        message_id=None if result.message_id is None else redact(result.message_id, secrets),
        metadata=_scrub_value(dict(result.metadata), secrets),
        reference=_scrub_value(dict(result.reference), secrets),
    )


class SecretLogFilter(logging.Filter):
    """Rewrites records that mention a secret; never drops a record."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a malformed record is the logging module's problem, not ours
            return True
        if any(s in text for s in self._secrets):
            record.msg = redact(text, self._secrets)
            record.args = None
        if record.exc_info and not record.exc_text:
            formatted = logging.Formatter().formatException(record.exc_info)
            if any(s in formatted for s in self._secrets):
                record.exc_text = redact(formatted, self._secrets)
        return True


class LogRedaction:
    """Redacts one adapter's secrets from the HTTP libraries' loggers while it has requests
    in flight.

    Logger-level filters run before a record propagates to any handler, so this covers
    whatever handlers the application (or pytest's caplog) installs. Installing per request
    (reference-counted for concurrent sends) rather than per adapter lifetime means an
    adapter that is never closed leaves nothing behind on the global loggers.
    """

    def __init__(
        self, secrets: tuple[str, ...], logger_names: Iterable[str] = HTTP_LIBRARY_LOGGERS
    ) -> None:
        self._filter = SecretLogFilter(secrets) if secrets else None
        self._loggers = [logging.getLogger(name) for name in logger_names]
        self._in_flight = 0

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        if self._filter is None:
            yield
            return
        if self._in_flight == 0:
            for logger in self._loggers:
                logger.addFilter(self._filter)
        self._in_flight += 1
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                for logger in self._loggers:
                    logger.removeFilter(self._filter)

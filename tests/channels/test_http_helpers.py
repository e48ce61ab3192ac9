"""Pure helpers behind the HTTP adapters: Retry-After, status classification, redaction."""

from __future__ import annotations

import json
from dataclasses import asdict
from email.utils import formatdate

import pytest

from uns_server.channels._http import HttpReply, classify_http_response, parse_retry_after
from uns_server.channels._redact import redact, redact_url, scrub_result, secret_variants
from uns_server.channels.base import ChannelResult

NOW = 1_750_000_000.0


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("120", 120.0),
        (" 1.5 ", 1.5),
        ("-3", 0.0),
        ("soon", None),
        ("nan", None),
        ("inf", None),
        (formatdate(NOW + 90, usegmt=True), 90.0),
        (formatdate(NOW - 90, usegmt=True), 0.0),
    ],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    assert parse_retry_after(header, now=NOW) == seconds


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, None),
        (202, None),
        (204, None),
        (301, "permanent"),
        (304, "permanent"),
        (400, "permanent"),
        (401, "permanent"),
        (403, "permanent"),
        (404, "permanent"),
        (409, "permanent"),
        (422, "permanent"),
        (408, "transient"),
        (429, "transient"),
        (500, "transient"),
        (502, "transient"),
        (503, "transient"),
        (504, "transient"),
    ],
)
def test_status_classification(status: int, outcome: str | None) -> None:
    result = classify_http_response(HttpReply(status, {}, b""), now=NOW)
    if outcome is None:
        assert result is None
    else:
        assert result is not None and not result.success
        assert result.retryable is (outcome == "transient")
        assert result.throttled is (status == 429)  # asked to wait, not failed
        json.dumps(dict(result.metadata))


def test_error_excerpt_is_short_and_single_line() -> None:
    reply = HttpReply(400, {}, b"line one\n\n  line two " + b"x" * 500)
    result = classify_http_response(reply, now=NOW)
    assert result is not None and result.error is not None
    assert "\n" not in result.error and len(result.error) < 260
    assert result.error.startswith("HTTP 400: line one line two")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/secret", "https://hooks.slack.com/***"),
        ("https://user:pw@example.com:8443/x?token=1", "https://example.com:8443/***"),
        ("https://example.com", "https://example.com"),
        ("https://example.com/?k=v", "https://example.com/***"),
        ("not a url", "***"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_scrub_masks_raw_and_url_encoded_secrets_everywhere() -> None:
    secret = "a/b c+d"
    secrets = secret_variants([secret, ""])
    result = ChannelResult.permanent(
        f"bad {secret} and a%2Fb%20c%2Bd",
        metadata={"echo": [secret, {"deep": f"x{secret}y"}], "n": 1},
    )
    scrubbed = scrub_result(result, secrets)
    assert secret not in repr(asdict(scrubbed)) and "a%2Fb" not in repr(asdict(scrubbed))
    assert scrubbed.metadata == {"echo": ["***", {"deep": "x***y"}], "n": 1}
    assert redact("no secrets here", secrets) == "no secrets here"

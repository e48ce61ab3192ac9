"""Provider request signatures, checked before anything else is read.

* Slack: ``X-Slack-Signature: v0=<hex HMAC-SHA256(signing secret, "v0:{ts}:{raw body}")>``
  with ``X-Slack-Request-Timestamp: {ts}`` (unix seconds) no more than five minutes
  from now, so a captured request cannot be replayed later.
* PagerDuty v3 webhooks: ``X-PagerDuty-Signature: v1=<hex HMAC-SHA256(secret, raw
  body)>``, possibly several comma-separated (one per active secret while PagerDuty
  rotates); one match is enough.

Every comparison is constant-time (``hmac.compare_digest``); several configured secrets
(several Slack apps or PagerDuty subscriptions) are each tried.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

SLACK_MAX_AGE_SECONDS = 300


def _hex_hmac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    return "v0=" + _hex_hmac(secret, f"v0:{timestamp}:".encode() + body)


def verify_slack(
    secrets: Sequence[str], timestamp: str | None, signature: str | None, body: bytes, now: float
) -> bool:
    if not secrets or not timestamp or not signature or not timestamp.isdigit():
        return False
    if abs(now - int(timestamp)) > SLACK_MAX_AGE_SECONDS:
        return False
    matches = [
        hmac.compare_digest(signature.encode(), slack_signature(s, timestamp, body).encode())
        for s in secrets
    ]
    return any(matches)


def pagerduty_signature(secret: str, body: bytes) -> str:
    return "v1=" + _hex_hmac(secret, body)


def verify_pagerduty(secrets: Sequence[str], header: str | None, body: bytes) -> bool:
    if not secrets or not header:
        return False
    offered = [part.strip().encode() for part in header.split(",") if part.strip()]
    matches = [
        hmac.compare_digest(candidate, pagerduty_signature(s, body).encode())
        for s in secrets
        for candidate in offered
    ]
    return any(matches)

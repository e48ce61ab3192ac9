"""Verifying UNS webhook deliveries on the receiving side (Standard Webhooks scheme).

UNS signs each delivery with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">``. Verify
against the *raw* request body (re-serialized JSON will not match), then use ``webhook-id``
to drop duplicates: it is identical on every retry of the same notification.

Standard library only, so any web framework can call it::

    from uns_clients.webhooks import WebhookVerificationError, verify_webhook

    try:
        verify_webhook(request.headers, raw_body, secret)
    except WebhookVerificationError:
        return 400

The secret is the one configured on the UNS webhook channel: ``whsec_<base64>`` (the key is
the decoded bytes) or any other string (the key is its UTF-8 bytes).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping

__all__ = ["TOLERANCE_SECONDS_DEFAULT", "WebhookVerificationError", "verify_webhook"]

TOLERANCE_SECONDS_DEFAULT = 300
_SECRET_PREFIX = "whsec_"


class WebhookVerificationError(Exception):
    """The webhook is not authentic: missing headers, no matching signature, or stale."""


def _key(secret: str) -> bytes:
    if secret.startswith(_SECRET_PREFIX):
        encoded = secret[len(_SECRET_PREFIX) :]
        try:
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise WebhookVerificationError("webhook secret is not valid whsec_ base64") from None
    else:
        key = secret.encode()
    if not key:
        raise WebhookVerificationError("webhook secret is empty")
    return key


def _header(headers: Mapping[str, str], name: str) -> str:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    raise WebhookVerificationError(f"missing {name} header")


def verify_webhook(
    headers: Mapping[str, str],
    body: bytes,
    secret: str,
    *,
    tolerance_seconds: float = TOLERANCE_SECONDS_DEFAULT,
    now: float | None = None,
) -> None:
    """Return if ``body`` was signed with ``secret`` within ``tolerance_seconds`` of ``now``.

    ``webhook-signature`` may hold several space-separated ``v1,<sig>`` entries (secret
    rotation); one match is enough. Comparison is constant-time. The timestamp check runs
    first and refuses both old and future-dated messages, which bounds replay.
    """
    msg_id = _header(headers, "webhook-id")
    raw_timestamp = _header(headers, "webhook-timestamp")
    signatures = _header(headers, "webhook-signature")
    try:
        timestamp = int(raw_timestamp.strip())
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not unix seconds") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_seconds:
        raise WebhookVerificationError("webhook-timestamp is outside the tolerance window")

    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue
        try:
            candidate = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(expected, candidate):
            return
    raise WebhookVerificationError("no matching webhook signature")

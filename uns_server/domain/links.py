"""Signed action links: capabilities that let one recipient answer one notification.

A token is ``itsdangerous``-signed JSON (HMAC-SHA256, URL-safe) binding:

* ``n`` -- the notification id,
* ``a`` -- the action set it allows (``ack``, ``dismiss``),
* ``r`` -- the recipient identity it was sent to (``email:oncall@example.com``,
  ``slack:#alerts``, ``webhook:<channel>``, ``pagerduty:<channel>``), who becomes the
  actor when it is used,
* ``e`` -- its expiry (unix seconds): the ack deadline as it could be known when the
  message was sent, plus the delivery lease. A snooze moves the deadline after the
  link was sent, so a link past ``e`` still verifies while its answer is owed and the
  current deadline plus the lease has not passed (``outlives``): checked at use
  against the row, so every link already sent follows every snooze, and none lives
  past the obligation's end beyond its own ``e``.

Keys rotate without breaking links in flight: tokens are signed with the newest key and
verified with any configured key. Tokens are never stored; a revoked token is kept as
its SHA-256 only (``token_hash``). Forms on the action page carry a nonce bound to the
token, a per-browser cookie and the time it was issued (``form_nonce``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from itsdangerous import BadData, URLSafeSerializer

ACK = "ack"
DISMISS = "dismiss"
ACTIONS = (ACK, DISMISS)
SALT = "uns.action-link.v1"
FORM_NONCE_MAX_AGE_SECONDS = 3600


@dataclass(frozen=True)
class LinkClaims:
    notification_id: str
    actions: tuple[str, ...]
    recipient: str
    expires_at: datetime


class LinkSigner:
    """Issues and verifies action-link tokens with a list of keys, newest first."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("at least one action-link key is required")
        self._keys = [k.encode() for k in keys]
        # itsdangerous signs with the *last* key and verifies with any.
        self._serializer = URLSafeSerializer(
            list(reversed(keys)),
            salt=SALT,
            signer_kwargs={"digest_method": hashlib.sha256},
        )

    def issue(self, claims: LinkClaims) -> str:
        payload = {
            "n": claims.notification_id,
            "a": list(claims.actions),
            "r": claims.recipient,
            "e": int(claims.expires_at.timestamp()),
        }
        token = self._serializer.dumps(payload)
        assert isinstance(token, str)
        return token

    def verify(self, token: str, now: datetime) -> LinkClaims | None:
        """The claims of a valid, unexpired token; None for anything else (one answer
        for tampered, expired and malformed tokens, so none can be told apart)."""
        claims = self.read(token)
        if claims is None or claims.expires_at <= now:
            return None
        return claims

    def read(self, token: str) -> LinkClaims | None:
        """The claims of a genuine token (signed by one of the keys, well formed),
        expired or not; None for anything else. Its expiry is the caller's to judge
        (``verify``, or ``outlives`` against the notification)."""
        try:
            payload: Any = self._serializer.loads(token)
        except (BadData, ValueError, TypeError):
            return None
        try:
            claims = LinkClaims(
                notification_id=str(payload["n"]),
                actions=tuple(a for a in payload["a"] if a in ACTIONS),
                recipient=str(payload["r"]),
                expires_at=datetime.fromtimestamp(int(payload["e"]), UTC),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        return claims if claims.actions else None

    def form_nonce(self, token: str, browser: str, now: datetime) -> str:
        """A nonce for the page's form, bound to the token and the browser's cookie."""
        issued = int(now.timestamp())
        return f"{issued}.{self._mac(self._keys[0], issued, token, browser)}"

    def check_form_nonce(self, nonce: str, token: str, browser: str, now: datetime) -> bool:
        issued_s, _, mac = nonce.partition(".")
        if not issued_s.isdigit() or not browser:
            return False
        issued = int(issued_s)
        if not 0 <= now.timestamp() - issued <= FORM_NONCE_MAX_AGE_SECONDS:
            return False
        return any(
            hmac.compare_digest(mac, self._mac(key, issued, token, browser)) for key in self._keys
        )

    @staticmethod
    def _mac(key: bytes, issued: int, token: str, browser: str) -> str:
        message = f"form|{issued}|{token_hash(token)}|{browser}".encode()
        return hmac.new(key, message, hashlib.sha256).hexdigest()


def outlives(
    claims: LinkClaims,
    *,
    ack_owed: bool,
    deadline: datetime | None,
    lease: timedelta,
    now: datetime,
) -> bool:
    """Is a genuine link still good at ``now``? Until its own expiry, as issued; after
    it, only while its notification's answer is owed (PENDING or SNOOZED) and before
    the current deadline plus the lease: a snooze moved the deadline past the expiry
    baked in at issue. Once the obligation ended, the extension ends with it."""
    if claims.expires_at > now:
        return True
    return ack_owed and deadline is not None and now < deadline + lease


def token_hash(token: str) -> str:
    """How a token is remembered (revocation): its SHA-256, never the token."""
    return hashlib.sha256(token.encode()).hexdigest()

"""Console sign-in: an operator API key buys a server-side session.

The browser holds only a random session id (cookie ``HttpOnly``, ``SameSite=Strict``,
``Secure`` under TLS); the table holds its SHA-256, the session's CSRF token and the
hash of the key it signed in with. A session ends at sign-out, after
``console_session_idle_minutes`` without a request, ``console_session_absolute_hours``
after sign-in, or when its key is revoked or loses the operator role (re-checked on
every request through the same ``Authenticator`` as gRPC, with its short cache).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from aiohttp import web

from uns_server.domain.enums import Role
from uns_server.domain.errors import PermissionDenied, Unauthenticated
from uns_server.services.auth import Authenticator, Principal, hash_key
from uns_server.store.port import Store

COOKIE = "uns_console"
# last_seen_at is written at most this often: browsing is reads, not a write per page.
TOUCH_EVERY = timedelta(seconds=60)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    id_hash: str
    principal: Principal
    csrf_token: str
    expires_at: datetime

    def csrf_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self.csrf_token)


class Sessions:
    def __init__(
        self,
        store: Store,
        authenticator: Authenticator,
        clock: Callable[[], datetime],
        *,
        idle: timedelta,
        absolute: timedelta,
    ) -> None:
        self._store = store
        self._auth = authenticator
        self._clock = clock
        self.idle = idle
        self.absolute = absolute

    async def sign_in(self, api_key: str, address: str = "") -> tuple[str, Session]:
        """A new session for an operator key: (the cookie value, the session). Raises
        ``Unauthenticated`` for an unknown or revoked key, ``PermissionDenied`` without
        the operator role, exactly as gRPC would."""
        # ``address``: unknown keys spend that client address's lookup budget, as on gRPC.
        principal = await self._auth.authenticate(f"Bearer {api_key.strip()}", address=address)
        principal.require(Role.OPERATOR)
        session_id = secrets.token_urlsafe(32)
        csrf = secrets.token_urlsafe(32)
        now = self._clock()
        expires = now + self.absolute
        async with self._store.write() as tx:
            await tx.console_sessions.purge_expired(now)
            await tx.console_sessions.insert(
                id_hash=_digest(session_id),
                principal=principal.name,
                key_hash=hash_key(api_key.strip()),
                csrf_token=csrf,
                now=now,
                expires_at=expires,
            )
        return session_id, Session(_digest(session_id), principal, csrf, expires)

    async def load(self, session_id: str | None, *, touch: bool = True) -> Session | None:
        """The live session for a cookie value, or None (and the row is gone if it
        expired). Refreshes the idle clock unless ``touch`` is false (a live stream
        re-checking its session is not the operator doing something)."""
        if not session_id or len(session_id) > 128:
            return None
        id_hash = _digest(session_id)
        now = self._clock()
        async with self._store.read() as tx:
            stored = await tx.console_sessions.by_hash(id_hash)
        if stored is None:
            return None
        principal = await self._auth.by_digest(stored.key_hash)
        if (
            stored.expires_at <= now
            or stored.last_seen_at + self.idle <= now
            or principal is None
            or Role.OPERATOR not in principal.roles
        ):
            await self.sign_out(session_id)
            return None
        if touch and now - stored.last_seen_at >= TOUCH_EVERY:
            async with self._store.write() as tx:
                await tx.console_sessions.touch(id_hash, now)
        return Session(id_hash, principal, stored.csrf_token, stored.expires_at)

    def key_revoked(self) -> None:
        """A key was revoked here: this server's cached key lookups are dropped, so its
        sessions, calls and streams end at their next check."""
        self._auth.forget_cached()

    async def sign_out(self, session_id: str) -> None:
        async with self._store.write() as tx:
            await tx.console_sessions.remove(_digest(session_id))


# Where the guard leaves the request's live session for handlers and templates.
SESSION_KEY = web.RequestKey("uns.console.session", Session)

__all__ = ["COOKIE", "SESSION_KEY", "PermissionDenied", "Session", "Sessions", "Unauthenticated"]

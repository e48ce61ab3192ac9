"""API-key authentication and role checks (SPEC §3).

Keys are ``uns_`` + 43 URL-safe characters (256 random bits), so a plain SHA-256
is a sufficient one-way hash and lookups stay a single indexed read. Lookups are
cached briefly (``CACHE_SECONDS``): a revocation takes effect within that time.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from uns_server.domain.enums import Role
from uns_server.domain.errors import PermissionDenied, Unauthenticated
from uns_server.store import api_keys
from uns_server.store.db import Database

CACHE_SECONDS = 5.0
KEY_PREFIX = "uns_"


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[Role]

    def require(self, *allowed: Role) -> None:
        if not self.roles.intersection(allowed):
            raise PermissionDenied(
                f"role {' or '.join(r.value for r in allowed)} required",
                metadata={"principal": self.name, "required_roles": ",".join(allowed)},
            )

    @property
    def sees_everything(self) -> bool:
        return Role.OPERATOR in self.roles


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key() -> tuple[str, str, str]:
    """A fresh key: (secret shown once, its hash, a short display prefix)."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    return secret, hash_key(secret), secret[: len(KEY_PREFIX) + 6]


def parse_roles(values: Iterable[str]) -> frozenset[Role]:
    try:
        return frozenset(Role(v.strip().lower()) for v in values if v.strip())
    except ValueError as exc:
        raise ValueError(
            f"unknown role in {list(values)}; use producer, responder, operator"
        ) from exc


@dataclass(frozen=True)
class KeyFile:
    """Credentials from the key file: API-key hashes, and (for mTLS) client-certificate
    common names, each mapped to a principal and roles."""

    keys: Mapping[str, Principal]
    certificates: Mapping[str, Principal]

    def __bool__(self) -> bool:
        return bool(self.keys or self.certificates)


def load_key_file(path: str) -> KeyFile:
    """A YAML/JSON list of entries ``{key | key_sha256 | certificate_cn, principal, roles}``."""
    entries: Any = yaml.safe_load(Path(path).read_text()) or []
    if isinstance(entries, Mapping):
        entries = entries.get("keys", [])
    keys: dict[str, Principal] = {}
    certificates: dict[str, Principal] = {}
    for entry in entries:
        principal = Principal(str(entry["principal"]), parse_roles(entry.get("roles", [])))
        if "certificate_cn" in entry:
            certificates[str(entry["certificate_cn"])] = principal
        else:
            keys[entry.get("key_sha256") or hash_key(str(entry["key"]))] = principal
    return KeyFile(keys, certificates)


async def create_key(
    db: Database, principal: str, roles: Iterable[str], description: str, now: datetime
) -> str:
    role_set = parse_roles(roles)
    secret, digest, prefix = new_key()
    async with db.write() as tx:
        await api_keys.insert_key(
            tx.conn,
            key_id=str(uuid.uuid4()),
            key_hash=digest,
            prefix=prefix,
            principal=principal,
            roles=sorted(r.value for r in role_set),
            description=description,
            now=now,
        )
    return secret


class Authenticator:
    def __init__(
        self,
        db: Database,
        key_file: KeyFile | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._file_keys = dict(key_file.keys) if key_file else {}
        self._certificates = dict(key_file.certificates) if key_file else {}
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._monotonic = monotonic

    async def authenticate(
        self, authorization: str | None, certificate_cn: str | None = None
    ) -> Principal:
        """An API key wins; otherwise a verified client certificate (mTLS) whose common
        name the key file maps to a principal. Key lookups go by SHA-256 of the secret,
        so no comparison ever runs over the secret itself (nothing to time)."""
        if not authorization and certificate_cn is not None:
            principal = self._certificates.get(certificate_cn)
            if principal is None:
                raise Unauthenticated(
                    "client certificate is not mapped to a principal",
                    metadata={"certificate_cn": certificate_cn},
                )
            return principal
        if not authorization:
            raise Unauthenticated("missing credentials: send 'authorization: Bearer <api key>'")
        scheme, _, secret = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthenticated("malformed authorization metadata: use 'Bearer <api key>'")
        principal = await self.by_digest(hash_key(secret.strip()))
        if principal is None:
            raise Unauthenticated("unknown or revoked API key")
        return principal

    async def by_digest(self, digest: str) -> Principal | None:
        """The principal of the active key with this SHA-256, from the key file or the
        database (cached as above); None for an unknown or revoked key. The console
        re-checks its session's key with it, so revoking a key ends its sessions."""
        principal = self._file_keys.get(digest)
        if principal is None:
            principal = await self._lookup(digest)
        return principal

    async def _lookup(self, digest: str) -> Principal | None:
        now = self._monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        async with self._db.read() as conn:
            row = await api_keys.active_by_hash(conn, digest)
        principal = Principal(row["principal"], parse_roles(row["roles"])) if row else None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (now, principal)
        return principal

"""API-key authentication, role checks and tenancy (SPEC §3).

Tenancy: a producer or responder acts only on notifications of its own principal and,
for a responder, of the principals its key ``responds_for``; only an operator crosses
tenants. Everything outside a caller's tenants answers NOT_FOUND, like an unknown id.

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
from uns_server.domain.errors import PermissionDenied, RateLimited, Unauthenticated
from uns_server.services.rate_limits import TokenBuckets
from uns_server.store.port import Store

CACHE_SECONDS = 5.0
KEY_PREFIX = "uns_"


@dataclass(frozen=True)
class Principal:
    name: str
    roles: frozenset[Role]
    # Other principals whose notifications this key may read and answer as a responder.
    responds_for: frozenset[str] = frozenset()

    def require(self, *allowed: Role) -> None:
        if not self.roles.intersection(allowed):
            raise PermissionDenied(
                f"role {' or '.join(r.value for r in allowed)} required",
                metadata={"principal": self.name, "required_roles": ",".join(allowed)},
            )

    @property
    def sees_everything(self) -> bool:
        return Role.OPERATOR in self.roles

    @property
    def tenants(self) -> frozenset[str] | None:
        """The principals whose notifications this caller may read (Get, Watch) and, as a
        responder, settle; None for an operator, who crosses tenants. A producer's tenant
        is its own principal; a responder adds its ``responds_for``."""
        if self.sees_everything:
            return None
        if Role.RESPONDER in self.roles:
            return self.responds_for | {self.name}
        return frozenset({self.name})

    def may_read(self, owner: str) -> bool:
        """Whether a notification of principal ``owner`` is within this caller's tenants."""
        tenants = self.tenants
        return tenants is None or owner in tenants

    def may_name(self, actor: str | None) -> bool:
        """Whether a refusal may name ``actor`` (someone who acted on a notification) to
        this caller: itself, a principal of its own tenants, or anyone for an operator.
        Any other actor is somebody else's identity and stays unnamed."""
        if actor is None:
            return False
        return actor == self.name or self.may_read(actor)


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


def parse_responds_for(values: object) -> frozenset[str]:
    """Principals from a list, or from one comma-separated string (a key file, a flag)."""
    if values is None:
        return frozenset()
    if isinstance(values, str):
        values = values.split(",")
    if not isinstance(values, list | tuple | set | frozenset) or not all(
        isinstance(v, str) for v in values
    ):
        raise ValueError(f"responds_for must be a list of principal names, not {values!r}")
    return frozenset(v.strip() for v in values if v.strip())


def load_key_file(path: str) -> KeyFile:
    """A YAML/JSON list of entries ``{key | key_sha256 | certificate_cn, principal, roles,
    responds_for}`` (``responds_for``: the other principals a responder answers for)."""
    return key_file_from(yaml.safe_load(Path(path).read_text()), path)


def key_file_from(entries: Any, path: str) -> KeyFile:
    """The key file's parsed content (see ``load_key_file``); ``path`` names it in errors."""
    entries = entries or []
    if isinstance(entries, Mapping):
        entries = entries.get("keys", [])
    keys: dict[str, Principal] = {}
    certificates: dict[str, Principal] = {}
    for entry in entries:
        roles = parse_roles(entry.get("roles", []))
        responds_for = parse_responds_for(entry.get("responds_for"))
        if responds_for and Role.RESPONDER not in roles:
            raise ValueError(
                f"{path}: the entry for principal {entry['principal']!r} has responds_for, "
                "which needs the responder role"
            )
        principal = Principal(str(entry["principal"]), roles, responds_for)
        if "certificate_cn" in entry:
            certificates[str(entry["certificate_cn"])] = principal
        else:
            keys[entry.get("key_sha256") or hash_key(str(entry["key"]))] = principal
    return KeyFile(keys, certificates)


async def create_key(
    store: Store,
    principal: str,
    roles: Iterable[str],
    description: str,
    now: datetime,
    responds_for: Iterable[str] = (),
) -> str:
    role_set = parse_roles(roles)
    secret, digest, prefix = new_key()
    async with store.write() as tx:
        await tx.api_keys.insert(
            key_id=str(uuid.uuid4()),
            key_hash=digest,
            prefix=prefix,
            principal=principal,
            roles=sorted(r.value for r in role_set),
            responds_for=sorted(set(responds_for)),
            description=description,
            now=now,
        )
    return secret


class Authenticator:
    def __init__(
        self,
        store: Store,
        key_file: KeyFile | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        failed_lookups: TokenBuckets | None = None,
    ) -> None:
        """``failed_lookups``: per client address, the budget of key lookups that found
        nothing; an address that spent it is refused before the database is read."""
        self._store = store
        self._failed_lookups = failed_lookups
        self._file_keys = dict(key_file.keys) if key_file else {}
        self._certificates = dict(key_file.certificates) if key_file else {}
        self._cache: dict[str, tuple[float, Principal | None]] = {}
        self._monotonic = monotonic

    async def authenticate(
        self, authorization: str | None, certificate_cn: str | None = None, address: str = ""
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
        principal = await self.by_digest(hash_key(secret.strip()), address)
        if principal is None:
            raise Unauthenticated("unknown or revoked API key")
        return principal

    async def by_digest(self, digest: str, address: str = "") -> Principal | None:
        """The principal of the active key with this SHA-256, from the key file or the
        database (cached as above); None for an unknown or revoked key. The console
        re-checks its session's key with it, so revoking a key ends its sessions."""
        principal = self._file_keys.get(digest)
        if principal is None:
            principal = await self._lookup(digest, address)
        return principal

    async def recheck(self, authorization: str | None, certificate_cn: str | None) -> None:
        """Raises ``Unauthenticated`` when credentials that were accepted no longer
        map to a principal (a revoked key): what a long-lived stream re-checks. Not
        guarded by the failed-lookup budget (the key was valid; this is no probe)."""
        if not authorization:  # a client certificate: the key file maps it, for good
            return
        digest = hash_key(authorization.strip().partition(" ")[2].strip())
        if digest not in self._file_keys and await self._lookup(digest, guarded=False) is None:
            raise Unauthenticated("unknown or revoked API key")

    def forget_cached(self) -> None:
        """Drops every cached lookup: a key revoked through this server stops working
        here at once (other servers: within ``CACHE_SECONDS``)."""
        self._cache.clear()

    async def _lookup(
        self, digest: str, address: str = "", guarded: bool = True
    ) -> Principal | None:
        now = self._monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        if guarded:
            await self._guard_lookup(address)
        async with self._store.read() as tx:
            key = await tx.api_keys.active_by_hash(digest)
        principal = (
            Principal(key.principal, frozenset(key.roles), frozenset(key.responds_for))
            if key
            else None
        )
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (now, principal)
        if principal is None and guarded and self._failed_lookups is not None:
            await self._failed_lookups.take(address)
        return principal

    async def _guard_lookup(self, address: str) -> None:
        """Unknown keys cannot force unbounded database reads: each distinct one misses
        the cache, so an address whose lookups keep finding nothing is refused first."""
        if self._failed_lookups is None:
            return
        delay = self._failed_lookups.empty(address)
        if delay is not None:
            raise RateLimited(
                "too many unknown API keys from this address; retry after the RetryInfo "
                "delay with a valid key",
                retry_delay_seconds=delay,
                metadata={"limit": "failed_authentications"},
            )

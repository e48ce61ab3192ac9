"""Reading one channel's raw options: each with its type checked, secrets inline or
from the environment, URLs, addresses and static headers validated, and whatever is
left over refused as a typo (with the closest known option as a hint).

Messages name the channel, option and variable, never a secret's value.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

TIMEOUT_SECONDS_MAX = 300.0

_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Headers the webhook adapter owns; a static header must not forge or clobber them.
_RESERVED_WEBHOOK_HEADERS = frozenset(
    {"webhook-id", "webhook-timestamp", "webhook-signature", "content-type", "content-length"}
)


class ChannelConfigError(ValueError):
    """The channel configuration is invalid; the message names the channel and option."""


_T = TypeVar("_T")
_MISSING: Any = object()


class Options:
    """One channel's raw options, read with type checks; leftovers are reported as typos."""

    def __init__(self, channel: str, raw: Mapping[str, Any], environ: Mapping[str, str] | None):
        self.channel = channel
        self._raw = raw
        self._environ = environ
        self._used = {"type"}

    def fail(self, message: str) -> ChannelConfigError:
        return ChannelConfigError(f"channel {self.channel!r}: {message}")

    def _get(self, key: str, check: Callable[[Any], bool], kind: str, default: Any) -> Any:
        self._used.add(key)
        if key not in self._raw or self._raw[key] is None:
            if default is _MISSING:
                raise self.fail(f"option {key!r} is required")
            return default
        value = self._raw[key]
        if not check(value):
            raise self.fail(f"option {key!r} must be {kind}")
        return value

    def text(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, lambda v: isinstance(v, str), "a string", default)
        if isinstance(value, str) and not value.strip():
            raise self.fail(f"option {key!r} must not be empty")
        return value

    def flag(self, key: str, default: bool) -> bool:
        return bool(self._get(key, lambda v: isinstance(v, bool), "true or false", default))

    def integer(self, key: str, default: Any = _MISSING) -> Any:
        return self._get(
            key, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer", default
        )

    def seconds(self, key: str, default: float) -> float:
        value = self._get(
            key,
            lambda v: isinstance(v, int | float) and not isinstance(v, bool),
            "a number of seconds",
            default,
        )
        if not 0 < value <= TIMEOUT_SECONDS_MAX:
            raise self.fail(f"option {key!r} must be in (0, {TIMEOUT_SECONDS_MAX:g}]")
        return float(value)

    def url(self, key: str, *, secret: bool = False, default: Any = _MISSING) -> Any:
        value = self.secret(key, default=default) if secret else self.text(key, default)
        if isinstance(value, str) and not value.startswith(("https://", "http://")):
            raise self.fail(f"option {key!r} must be an http(s) URL")
        return value

    def secret(self, key: str, *, default: Any = _MISSING) -> Any:
        """``key`` inline or ``key_env`` naming an environment variable (not both)."""
        env_key = f"{key}_env"
        if key in self._raw and env_key in self._raw:
            raise self.fail(f"give either {key!r} or {env_key!r}, not both")
        if env_key not in self._raw:
            return self.text(key, default)
        variable = self.text(env_key)
        self._used.add(key)
        if self._environ is None:
            raise self.fail(f"{env_key!r} needs an environment, none was provided")
        value = self._environ.get(variable)
        if not value:
            raise self.fail(f"environment variable {variable!r} ({env_key}) is not set")
        return value

    def addresses(self, key: str) -> tuple[str, ...]:
        value = self._get(
            key,
            lambda v: (
                isinstance(v, str)
                or (isinstance(v, list | tuple) and all(isinstance(x, str) for x in v))
            ),
            "an address or a list of addresses",
            _MISSING,
        )
        items = (value,) if isinstance(value, str) else tuple(value)
        if not items or not all("@" in a and a.strip() == a and "\n" not in a for a in items):
            raise self.fail(f"option {key!r} must hold at least one email address")
        return items

    def headers(self, key: str, env_key: str) -> Mapping[str, str]:
        inline = self._get(key, lambda v: isinstance(v, Mapping), "a mapping", {})
        from_env = self._get(env_key, lambda v: isinstance(v, Mapping), "a mapping", {})
        out: dict[str, str] = {}
        for name, value in inline.items():
            out[name] = value
        for name, variable in from_env.items():
            if (
                not isinstance(variable, str)
                or not self._environ
                or not self._environ.get(variable)
            ):
                raise self.fail(f"header {name!r}: environment variable {variable!r} is not set")
            out[name] = self._environ[variable]
        for name, value in out.items():
            if not isinstance(name, str) or not _HEADER_NAME_RE.match(name):
                raise self.fail(f"header name {name!r} is not a valid HTTP header name")
            if name.lower() in _RESERVED_WEBHOOK_HEADERS:
                raise self.fail(f"header {name!r} is set by the adapter itself")
            if not isinstance(value, str) or not value.isascii() or "\r" in value or "\n" in value:
                raise self.fail(f"header {name!r} must be a single-line ASCII string")
        return MappingProxyType(out)

    def finish(self) -> None:
        unknown = sorted(set(self._raw) - self._used)
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, sorted(self._used), n=1)
                hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise self.fail(f"unknown option(s): {', '.join(hints)}")

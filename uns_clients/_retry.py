"""Which errors each call retries, and how long it waits (AIP-194).

Only calls that are safe to repeat are retried, and only on errors that say "try again":

======================  =========================================  =====================
call                    why it is safe                             retried on
======================  =========================================  =====================
SendNotification        the same idempotency_key on every attempt  UNAVAILABLE,
                                                                   DEADLINE_EXCEEDED
Simulate, Get, List     reads                                      UNAVAILABLE
Acknowledge             same actor + same outcome is idempotent    UNAVAILABLE
Replay, ResolveFailure  not idempotent                             RATE_LIMITED only
======================  =========================================  =====================

``UNAVAILABLE`` includes the service's own ``STORAGE_UNAVAILABLE`` (its database is down).
Every call also retries ``RATE_LIMITED`` (RESOURCE_EXHAUSTED): the server shed it before
acting, so repeating it is safe, and it waits the ``google.rpc.RetryInfo`` delay the
server gave instead of its own backoff. Attempts are bounded by ``retry_max_attempts``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
)

from uns_clients._config import ClientConfig
from uns_clients._errors import DeadlineExceeded, RateLimited, Unavailable, UnsError

log = logging.getLogger("uns_clients")

SEND_RETRY_ON: tuple[type[UnsError], ...] = (Unavailable, DeadlineExceeded, RateLimited)
SAFE_RETRY_ON: tuple[type[UnsError], ...] = (Unavailable, RateLimited)
# Calls that are not safe to repeat retry nothing but RATE_LIMITED: the server refused
# that one before acting on it.
NO_RETRY: tuple[type[UnsError], ...] = (RateLimited,)
# Waits the server asks for are stretched by up to this share, never shortened, so
# clients shed together do not all come back at the same instant.
RETRY_DELAY_JITTER = 0.2


def backoff_seconds(
    config: ClientConfig, failures: int, rand: random.Random | None = None
) -> float:
    """The wait after ``failures`` consecutive failures (1 for the first): exponential,
    capped, and jittered to between half and all of its value so clients that failed
    together do not come back together."""
    ceiling = min(
        config.retry_max_backoff_seconds,
        config.retry_initial_backoff_seconds
        * config.retry_backoff_multiplier ** max(0, failures - 1),
    )
    return ceiling * (rand or random).uniform(0.5, 1.0)


def retry_delay_seconds(server_delay: float, rand: random.Random | None = None) -> float:
    """The wait before retrying a call the server answered with a RetryInfo: at least
    what it asked for (a token is back by then), stretched by a little jitter."""
    return server_delay * (rand or random).uniform(1.0, 1.0 + RETRY_DELAY_JITTER)


def _retry_kwargs(
    config: ClientConfig,
    rpc: str,
    retry_on: tuple[type[UnsError], ...],
    context: Mapping[str, str],
) -> dict[str, Any]:
    suffix = "".join(f"; {k}={v}" for k, v in context.items())

    def wait(state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, UnsError) and error.retry_delay is not None:
            return retry_delay_seconds(error.retry_delay)
        return backoff_seconds(config, state.attempt_number)

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        reason = error.reason if isinstance(error, UnsError) else type(error).__name__
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s failed with %s; retrying in %.2fs (attempt %d of %d)%s",
            rpc,
            reason,
            delay,
            state.attempt_number + 1,
            config.retry_max_attempts,
            suffix,
            extra={"rpc": rpc, "reason": reason, "attempt": state.attempt_number + 1, **context},
        )

    return {
        "stop": stop_after_attempt(config.retry_max_attempts if retry_on else 1),
        "wait": wait,
        "retry": retry_if_exception_type(retry_on),
        "before_sleep": before_sleep,
        "reraise": True,
    }


def async_retrying(
    config: ClientConfig,
    rpc: str,
    retry_on: tuple[type[UnsError], ...],
    context: Mapping[str, str] | None = None,
) -> AsyncRetrying:
    return AsyncRetrying(**_retry_kwargs(config, rpc, retry_on, context or {}))


def sync_retrying(
    config: ClientConfig,
    rpc: str,
    retry_on: tuple[type[UnsError], ...],
    context: Mapping[str, str] | None = None,
) -> Retrying:
    return Retrying(**_retry_kwargs(config, rpc, retry_on, context or {}))

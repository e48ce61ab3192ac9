"""Delivery policy: revision content, server defaults and per-request resolution.

Resolution (SPEC §2, seed 001 §4)::

    ACTIVE revision of notification_type?
      yes -> its spec; a producer-declared delivery_mode / require_ack / priority that
             differs from the spec is refused (POLICY_OVERRIDE), an equal one is fine
      no  -> the server's default channels (``--default-channels``), with the other
             defaults each overridden by the producer's declared value; without
             default channels the request is refused (NO_POLICY)

The result, :class:`EffectivePolicy`, is frozen into the ACCEPTED event. Its
``effective_hash`` covers the effective values only (not policy id or revision), so
notifications resolved to the same behaviour coalesce across revisions with equal content,
and notifications resolved differently never do (the hash is part of the dedup key).

One module per concern, all re-exported here (callers import from ``domain.policy``):
``spec`` (the revision content, its validation, defaults and content hash) and
``resolution`` (server defaults, :class:`EffectivePolicy`, :func:`resolve`).
"""

from uns_server.domain.policy.resolution import (
    EffectivePolicy,
    ServerDefaults,
    check_sender,
    resolve,
)
from uns_server.domain.policy.spec import (
    ACK_TIMEOUT_MINUTES_DEFAULT,
    ACK_TIMEOUT_MINUTES_MAX,
    CHANNELS_MAX,
    DEDUP_WINDOW_SECONDS_DEFAULT,
    DEDUP_WINDOW_SECONDS_MAX,
    DELIVERY_MODE_DEFAULT,
    MAX_ATTEMPTS_DEFAULT,
    MAX_ATTEMPTS_MAX,
    PRIORITY_DEFAULT,
    PolicyRevision,
    PolicySpec,
    content_hash,
    normalize_spec,
)

__all__ = [
    "ACK_TIMEOUT_MINUTES_DEFAULT",
    "ACK_TIMEOUT_MINUTES_MAX",
    "CHANNELS_MAX",
    "DEDUP_WINDOW_SECONDS_DEFAULT",
    "DEDUP_WINDOW_SECONDS_MAX",
    "DELIVERY_MODE_DEFAULT",
    "MAX_ATTEMPTS_DEFAULT",
    "MAX_ATTEMPTS_MAX",
    "PRIORITY_DEFAULT",
    "EffectivePolicy",
    "PolicyRevision",
    "PolicySpec",
    "ServerDefaults",
    "check_sender",
    "content_hash",
    "normalize_spec",
    "resolve",
]

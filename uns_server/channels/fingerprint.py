"""A short fingerprint of a replica's channel configuration, published as a metric and
logged at start, so replicas that disagree (a rollout half done, a forgotten file)
are visible before they matter.

It covers what decides which work a replica can take: each channel's name and type.
Secrets (URLs, tokens, keys) never enter it, so rotating one does not change it, and
the unauthenticated metrics endpoint reveals nothing about them.
"""

from __future__ import annotations

import hashlib
import json

from uns_server.channels.config import ChannelsConfig

FINGERPRINT_HEX_CHARS = 12


def channel_fingerprint(config: ChannelsConfig) -> str:
    """Hex digest of the sorted ``name: type`` pairs (the same on every replica with
    the same channels)."""
    pairs = sorted((name, cfg.type) for name, cfg in config.channels.items())
    canonical = json.dumps(pairs, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:FINGERPRINT_HEX_CHARS]

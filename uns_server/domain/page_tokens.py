"""Opaque page tokens (AIP-158): a JSON array, base64url without padding.

Tokens are neither secret nor signed: each listing checks every field it decodes, and a
token it did not make is INVALID_REQUEST, never an error of the server.
"""

from __future__ import annotations

import base64
import json
from typing import Any


def encode(*fields: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


def decode(token: str, length: int) -> list[Any]:
    """The ``length`` fields of a token ``encode`` made; ValueError on anything else."""
    try:
        fields = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, RecursionError):  # bad base64, UTF-8 or JSON; JSON nested deep
        raise ValueError("not a page token") from None
    if not isinstance(fields, list) or len(fields) != length:
        raise ValueError("not a page token")
    return fields

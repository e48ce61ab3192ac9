"""AIP-158 paging: page sizes, and opaque page tokens (a JSON array, base64url without
padding).

Tokens are neither secret nor signed: each listing checks every field it decodes, and a
token it did not make is INVALID_REQUEST, never an error of the server.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from uns_server.domain.errors import InvalidRequest

PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 1000
# Tokens this server makes stay far below this (the longest carries a capped filter,
# ``filters.FILTER_MAX_CHARS``): anything longer is refused before it is decoded.
TOKEN_MAX_CHARS = 64 * 1024


def page_limit(page_size: int) -> int:
    """Rows per page: 0 means the default, and a size above the maximum is coerced to
    it (AIP-158); a negative size is INVALID_REQUEST."""
    if page_size < 0:
        raise InvalidRequest.of_field("page_size", "must not be negative")
    return min(page_size or PAGE_SIZE_DEFAULT, PAGE_SIZE_MAX)


def encode_token(*fields: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


def decode_token(token: str, length: int) -> list[Any]:
    """The ``length`` fields of a token ``encode_token`` made; ValueError on anything else."""
    if len(token) > TOKEN_MAX_CHARS:
        raise ValueError("not a page token")
    try:
        fields = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, RecursionError):  # bad base64, UTF-8 or JSON; JSON nested deep
        raise ValueError("not a page token") from None
    if not isinstance(fields, list) or len(fields) != length:
        raise ValueError("not a page token")
    return fields

"""The JSON text written to JSON/JSONB columns.

orjson encodes the documents and event payloads every accept and settlement writes in
a fraction of the standard library's time. What orjson refuses (integers beyond 64
bits, which a request's Struct can hold, and non-string keys) goes through ``json``.
Reading stays on ``json``: orjson would turn such integers into floats.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value)

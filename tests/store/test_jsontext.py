"""JSON column text: orjson's output, and the standard library's for what orjson refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from uns_server.store import jsontext


@pytest.mark.parametrize(
    "value",
    [
        {"title": "é ✓", "n": 1.5, "flag": True, "none": None, "list": [1, "two", {"x": -0.0}]},
        {"big": 10**20, "small": -(2**70)},  # beyond 64 bits: orjson refuses
        {1: "int key"},  # orjson refuses; json makes it "1"
        None,
    ],
)
def test_dumps_reads_back_as_the_standard_library_would(value: Any) -> None:
    assert json.loads(jsontext.dumps(value)) == json.loads(json.dumps(value))

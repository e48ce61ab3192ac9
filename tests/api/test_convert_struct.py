"""``convert.struct_to_dict`` walks a request Struct itself (not json_format, whose
generic path cost half of the request conversion): same values as
``MessageToDict``, same refusal of non-finite numbers."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2

from uns_server.api import convert
from uns_server.domain.errors import InvalidRequest

SAMPLES: list[dict[str, Any]] = [
    {},
    {"host": "db-1", "used_pct": 92, "ratio": 0.25, "runbook": "https://runbooks/disk"},
    {"flag": True, "off": False, "none": None, "empty": "", "zero": 0, "neg": -1.5e300},
    {"nested": {"a": {"b": [1, "two", None, True, {"c": []}]}}, "list": [[], [[1]], {}]},
    {"unicode": "é✓\u0000", "big": 2.0**53 + 2, "tiny": 5e-324},
]


@pytest.mark.parametrize("sample", SAMPLES)
def test_same_values_as_message_to_dict(sample: dict[str, Any]) -> None:
    struct = struct_pb2.Struct()
    struct.update(sample)
    ours = convert.struct_to_dict(struct)
    theirs = json_format.MessageToDict(struct)
    assert ours == theirs
    assert repr(ours) == repr(theirs)  # same types too (92.0, not 92), same key order


def test_a_value_with_no_kind_is_null() -> None:
    struct = struct_pb2.Struct()
    struct.fields["unset"].Clear()
    assert convert.struct_to_dict(struct) == json_format.MessageToDict(struct) == {"unset": None}


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", ["top", "nested", "list"])
def test_non_finite_numbers_are_refused(number: float, where: str) -> None:
    struct = struct_pb2.Struct()
    if where == "top":
        struct.fields["x"].number_value = number
    elif where == "nested":
        struct.fields["x"].struct_value.fields["y"].number_value = number
    else:
        struct.fields["x"].list_value.values.add().number_value = number
    with pytest.raises(InvalidRequest) as refused:
        convert.struct_to_dict(struct, "metadata")
    assert refused.value.violations[0].field == "metadata"
    assert "finite" in refused.value.violations[0].description

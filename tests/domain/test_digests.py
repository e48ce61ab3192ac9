"""Digests: known values, canonical JSON, and fingerprint properties."""

from __future__ import annotations

import hashlib
import random
from dataclasses import fields, replace
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uns_server.domain.digests import (
    canonical_json,
    dedup_digest,
    fingerprint,
    idempotency_digest,
)
from uns_server.domain.enums import AutonomyMode, DeliveryMode, Intent, Priority
from uns_server.domain.requests import AutonomyContext, SendRequest


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_idempotency_digest_is_sha256_of_the_json_array() -> None:
    assert idempotency_digest("svc", "router", "k-1") == sha('["svc","router","k-1"]')
    assert idempotency_digest("svc", "router", "ü") == sha('["svc","router","ü"]')
    # The array boundary matters: no concatenation ambiguity.
    assert idempotency_digest("a", "bc", "d") != idempotency_digest("ab", "c", "d")


def test_dedup_digest_is_sha256_of_the_json_array() -> None:
    assert dedup_digest("svc", "router", "storm", "e" * 64) == sha(
        '["svc","router","storm","' + "e" * 64 + '"]'
    )
    assert dedup_digest("svc", "router", "storm", "a" * 64) != dedup_digest(
        "svc", "router", "storm", "b" * 64
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [1.0, 2.5, None, True]}, '{"a":[1,2.5,null,true],"b":1}'),
        ({"z": {"y": 1, "x": 2}}, '{"z":{"x":2,"y":1}}'),
        (("ü", "\u2028"), '["ü","\u2028"]'),
        (Priority.HIGH, '"HIGH"'),
        (-0.0, "0"),
        (1e20, "100000000000000000000"),
        (2**53 + 1, str(2**53)),  # as a Struct double carries it
        (False, "false"),
    ],
)
def test_canonical_json(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10**400, {1: "a"}, object(), {1.5}])
def test_canonical_json_rejects_non_json(value: object) -> None:
    with pytest.raises(ValueError):
        canonical_json(value)


def base() -> SendRequest:
    return SendRequest(
        notification_type="trading.circuit_breaker",
        intent=Intent.SAFETY,
        title="t",
        message="m",
        source="s",
        idempotency_key="k",
        dedup_key="d",
        correlation_id="c",
        autonomy_context=AutonomyContext(AutonomyMode.LIVE, "agent"),
        metadata={"a": 1, "b": {"c": [1, 2]}},
        delivery_mode=DeliveryMode.GUARANTEED,
        require_ack=True,
        priority=Priority.HIGH,
    )


def test_fingerprint_known_value() -> None:
    expected = sha(
        '{"autonomy_context":{"agent_id":"agent","autonomy_mode":"LIVE"},"correlation_id":"c",'
        '"dedup_key":"d","delivery_mode":"GUARANTEED","idempotency_key":"k",'
        '"intent":"SAFETY","message":"m","metadata":{"a":1,"b":{"c":[1,2]}},'
        '"notification_type":"trading.circuit_breaker","priority":"HIGH",'
        '"require_ack":true,"source":"s","title":"t"}'
    )
    assert fingerprint(base()) == expected


# -- properties -------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
metadata_st = st.dictionaries(st.text(max_size=6), json_values, max_size=6)


def reorder(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's key order shuffled (lists keep order)."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: reorder(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [reorder(v, rnd) for v in value]
    return value


def as_struct(value: Any) -> Any:
    """What a protobuf Struct hands back: every number a float."""
    if isinstance(value, dict):
        return {k: as_struct(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_struct(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@given(metadata=metadata_st, seed=st.integers())
def test_metadata_key_order_does_not_change_the_fingerprint(
    metadata: dict[str, Any], seed: int
) -> None:
    shuffled = reorder(metadata, random.Random(seed))
    assert fingerprint(replace(base(), metadata=shuffled)) == fingerprint(
        replace(base(), metadata=metadata)
    )


@given(metadata=metadata_st)
def test_ints_and_struct_doubles_fingerprint_the_same(metadata: dict[str, Any]) -> None:
    assert fingerprint(replace(base(), metadata=as_struct(metadata))) == fingerprint(
        replace(base(), metadata=metadata)
    )


def test_one_and_one_point_zero_are_equal_but_one_point_five_is_not() -> None:
    one = fingerprint(replace(base(), metadata={"n": 1, "l": [2]}))
    assert fingerprint(replace(base(), metadata={"n": 1.0, "l": [2.0]})) == one
    assert fingerprint(replace(base(), metadata={"n": 1.5, "l": [2]})) != one
    assert fingerprint(replace(base(), metadata={"n": True, "l": [2]})) != one
    assert fingerprint(replace(base(), metadata={"n": "1", "l": [2]})) != one


@given(seed=st.integers())
def test_field_order_does_not_change_the_fingerprint(seed: int) -> None:
    kwargs = {f.name: getattr(base(), f.name) for f in fields(SendRequest)}
    items = list(kwargs.items())
    random.Random(seed).shuffle(items)
    assert fingerprint(SendRequest(**dict(items))) == fingerprint(base())


# One distinct replacement value per payload field; every field of SendRequest is listed,
# so adding a field without deciding its fingerprint role fails the completeness test.
CHANGES: dict[str, list[Any]] = {
    "notification_type": ["trading.other", "Trading.circuit_breaker"],
    "intent": [Intent.WARNING, None],
    "title": ["T", "t "],
    "message": ["m2", ""],
    "source": ["s2"],
    "idempotency_key": ["k2", ""],
    "dedup_key": ["d2", ""],
    "correlation_id": ["c2", ""],
    "autonomy_context": [
        None,
        AutonomyContext(AutonomyMode.SUPERVISED, "agent"),
        AutonomyContext(None, "agent"),
        AutonomyContext(AutonomyMode.LIVE, "agent2"),
    ],
    "metadata": [{}, {"a": 2, "b": {"c": [1, 2]}}, {"a": 1, "b": {"c": [2, 1]}}, {"a": 1}],
    "delivery_mode": [DeliveryMode.BEST_EFFORT, None],
    "require_ack": [False, None],
    "priority": [Priority.LOW, None],
    "schedule_time": [
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC),
    ],
}


def test_same_schedule_instant_in_another_zone_is_the_same_payload() -> None:
    utc = replace(base(), schedule_time=datetime(2026, 1, 1, 12, tzinfo=UTC))
    paris = replace(base(), schedule_time=datetime(2026, 1, 1, 13, tzinfo=ZoneInfo("Europe/Paris")))
    assert fingerprint(utc) == fingerprint(paris)


def test_change_table_covers_every_field() -> None:
    assert set(CHANGES) == {f.name for f in fields(SendRequest)}


@pytest.mark.parametrize(
    ("field", "value"), [(f, v) for f, values in CHANGES.items() for v in values]
)
def test_any_payload_change_changes_the_fingerprint(field: str, value: Any) -> None:
    assert fingerprint(replace(base(), **{field: value})) != fingerprint(base())


@given(a=st.text(max_size=20), b=st.text(max_size=20))
def test_distinct_titles_never_collide(a: str, b: str) -> None:
    same = fingerprint(replace(base(), title=a)) == fingerprint(replace(base(), title=b))
    assert same == (a == b)


def test_empty_autonomy_context_is_the_same_as_none() -> None:
    assert fingerprint(replace(base(), autonomy_context=AutonomyContext(None, ""))) == fingerprint(
        replace(base(), autonomy_context=None)
    )

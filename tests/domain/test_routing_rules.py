"""Routing rules' filters (``domain.policy.rules``, ``domain.filters`` with keyed
fields): the grammar, what each field compares, the first match, and that the parse
stays linear on hostile input."""

from __future__ import annotations

from typing import Any

import pytest

from uns_server.domain.enums import DeliveryMode, Intent, Priority
from uns_server.domain.errors import InvalidRequest
from uns_server.domain.filters import parse
from uns_server.domain.policy import PolicyRevision, PolicySpec, ServerDefaults, resolve
from uns_server.domain.policy.rules import (
    RULE_FILTER_MAX_CHARS,
    RoutingRule,
    first_match,
    metadata_text,
)
from uns_server.domain.requests import SendRequest


def request(**fields: Any) -> SendRequest:
    values: dict[str, Any] = {
        "notification_type": "db.lag",
        "intent": Intent.WARNING,
        "title": "t",
        "message": "m",
        "source": "db",
    }
    values.update(fields)
    return SendRequest(**values)


def rule(text: str) -> RoutingRule:
    return RoutingRule.parse(text, ("chat",))


def test_keyed_fields_parse_with_their_key() -> None:
    terms = parse('metadata.k8s.io-ns_1 = "a b" AND source = x', ("source",), keyed=("metadata",))
    assert [(t.field, t.value) for t in terms] == [("metadata.k8s.io-ns_1", "a b"), ("source", "x")]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("metadata = x", "'.' and a key"),
        ("metadata. = x", "a metadata key"),
        ("tags.x = y", "unknown field"),
        ("intent = SAFETY AND", "a term after AND"),
        ("priority = URGENT", "unknown value"),
        ("metadata.email_to = x", "reserved"),
        ("x" * (RULE_FILTER_MAX_CHARS + 1), "at most"),
    ],
)
def test_bad_filters_name_the_rule_field(text: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        RoutingRule.parse(text, ("chat",), at="spec.rules[3]")
    [violation] = info.value.violations
    assert violation.field == "spec.rules[3].filter" and words in violation.description


@pytest.mark.parametrize(
    ("text", "fields", "matches"),
    [
        ("", {}, True),
        ("intent = SAFETY", {"intent": Intent.SAFETY}, True),
        ("intent = notification_intent_safety", {"intent": Intent.SAFETY}, True),
        ("intent = SAFETY", {}, False),
        ("priority = HIGH", {"priority": Priority.HIGH}, True),
        ("priority = NORMAL", {}, True),  # the policy's priority when none is declared
        ("source = db", {}, True),
        ("source = DB", {}, False),
        ("metadata.cluster = prod", {"metadata": {"cluster": "prod"}}, True),
        ("metadata.cluster = prod", {"metadata": {}}, False),
        ("metadata.n = 3", {"metadata": {"n": 3.0}}, True),
        ("metadata.n = 0.5", {"metadata": {"n": 0.5}}, True),
        ("metadata.on = true", {"metadata": {"on": True}}, True),
        ("metadata.x = null", {"metadata": {"x": None}}, True),
        ('metadata.o = "{}"', {"metadata": {"o": {}}}, False),
        ("metadata.a = 1 AND metadata.b = 2", {"metadata": {"a": 1, "b": 3}}, False),
    ],
)
def test_what_each_field_compares(text: str, fields: dict[str, Any], matches: bool) -> None:
    assert rule(text).matches(request(**fields), Priority.NORMAL) is matches


def test_the_first_match_wins() -> None:
    rules = [rule("metadata.c = a AND intent = SAFETY"), rule("metadata.c = a"), rule("")]
    assert first_match(rules, request(metadata={"c": "a"}), Priority.NORMAL) == 1
    assert first_match(rules, request(metadata={"c": "b"}), Priority.NORMAL) == 2
    assert first_match(rules[:2], request(), Priority.NORMAL) is None


def test_metadata_text() -> None:
    assert [metadata_text(v) for v in ("s", 7, 7.0, 1.5, False, None, [1])] == [
        "s",
        "7",
        "7",
        "1.5",
        "false",
        "null",
        None,
    ]


def test_a_matched_rule_replaces_channels_and_is_frozen_in_the_hash() -> None:
    spec = PolicySpec.build(
        ["log"],
        DeliveryMode.GUARANTEED,
        False,
        rules=[RoutingRule("metadata.c = a", ("chat",))],
    )
    revision = PolicyRevision("p", "db.lag", 1, spec, "h", True, "op", None, None)  # type: ignore[arg-type]
    routed = resolve(request(metadata={"c": "a"}), revision, ServerDefaults())
    plain = resolve(request(), revision, ServerDefaults())
    assert (routed.channels, routed.matched_rule, routed.matched_rule_filter) == (
        ("chat",),
        0,
        "metadata.c = a",
    )
    assert (plain.channels, plain.matched_rule) == (("log",), None)
    assert routed.effective_hash != plain.effective_hash
    assert "rules" not in plain.to_json() and "matched_rule" not in plain.to_json()
    assert type(routed).from_json(routed.to_json()) == routed

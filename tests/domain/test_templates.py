"""``domain.templates``: which template is the most specific, and the length limits
per channel type (the rest is tested through the server, tests/api/
test_message_templates.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from uns_server.domain.templates import (
    LENGTH_LIMITS,
    Person,
    Template,
    choose,
    message_fields,
    render_message,
)

ALL = [
    Template("", "", "any"),
    Template("", "fr", "any-fr"),
    Template("ntfy", "", "ntfy"),
    Template("ntfy", "fr", "ntfy-fr"),
    Template("ntfy", "fr-CA", "ntfy-fr-CA"),
    Template("", "fr-CA", "any-fr-CA"),
]


@pytest.mark.parametrize(
    ("channel_type", "locale", "wanted"),
    [
        ("ntfy", "fr-CA", "ntfy-fr-CA"),
        ("ntfy", "fr-FR", "ntfy-fr"),
        ("ntfy", "de", "ntfy"),
        ("ntfy", "", "ntfy"),
        ("email", "fr-CA", "any-fr-CA"),
        ("email", "fr-BE", "any-fr"),
        ("email", "en", "any"),
    ],
)
def test_the_most_specific_template_wins(channel_type: str, locale: str, wanted: str) -> None:
    chosen = choose(ALL, channel_type, locale)
    assert chosen is not None and ALL[chosen].title == wanted


def test_a_type_only_template_beats_a_language_only_one() -> None:
    assert choose([Template("", "fr", "a"), Template("ntfy", "", "b")], "ntfy", "fr") == 1
    assert choose([Template("slack", "", "x")], "ntfy", "fr") is None


FIELDS = message_fields(
    title="t" * 300,
    message="m" * 5000,
    metadata={},
    intent="WARNING",
    notification_type="x",
    source="s",
    priority="NORMAL",
    accepted_at=datetime(2026, 1, 1, tzinfo=UTC),
)


@pytest.mark.parametrize("channel_type", sorted(LENGTH_LIMITS))
def test_length_limits_apply_after_rendering(channel_type: str) -> None:
    title_max, body_max = LENGTH_LIMITS[channel_type]
    out = render_message((), FIELDS, channel_type, Person())
    assert (len(out.title), len(out.body)) == (min(300, title_max), min(5000, body_max))
    assert out.title.endswith("…")


def test_other_types_take_what_they_are_given() -> None:
    out = render_message((), FIELDS, "webhook", Person())
    assert (len(out.title), len(out.body)) == (300, 5000)

"""The ListNotifications filter language (``domain.filters``): table-driven cases, a
round trip over every value, and a fuzz of hostile texts up to (and past) the cap."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uns_server.domain.errors import InvalidRequest
from uns_server.domain.filters import FILTER_MAX_CHARS, Term, parse

FIELDS = ("state", "source", "dead_letter", "notification_type")


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("", []),
        ("   \t\n ", []),
        ("state = PENDING", [Term("state", "PENDING", False)]),
        ("state=PENDING", [Term("state", "PENDING", False)]),
        ("  state  =  PENDING  ", [Term("state", "PENDING", False)]),
        (
            'state = FAILED AND source = "disk-monitor"',
            [Term("state", "FAILED", False), Term("source", "disk-monitor", True)],
        ),
        ('source = "a AND b"', [Term("source", "a AND b", True)]),
        ('source = "x AND state = FAILED"', [Term("source", "x AND state = FAILED", True)]),
        (r'source = "say \"hi\""', [Term("source", 'say "hi"', True)]),
        (r'source = "back\\slash"', [Term("source", "back\\slash", True)]),
        (r'source = "\\"', [Term("source", "\\", True)]),
        ('source = ""', [Term("source", "", True)]),
        ("source = a.b:c-d_e", [Term("source", "a.b:c-d_e", False)]),
        (
            "state = A\tAND\nsource = b",
            [Term("state", "A", False), Term("source", "b", False)],
        ),
        ('source="é🙂"', [Term("source", "é🙂", True)]),
    ],
)
def test_parses(text: str, terms: list[Term]) -> None:
    assert parse(text, FIELDS) == terms


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("state", "expected '=' at the end"),
        ("state =", "expected a value at the end"),
        ("= x", "expected a field name at character 1"),
        ("state != x", "expected '=' at character 7"),
        ("state = x y", "expected AND at character 11"),
        ("state = x and source = y", "expected AND at character 11"),
        ("state = x AND", "expected a term after AND at the end"),
        ("state = x ANDsource = y", "expected whitespace after AND"),
        ('state = "x"AND source = y', "expected AND at character 12"),
        ('source = "open', "the quoted value opened at character 10 is not closed"),
        ('source = "ends in \\', "is not closed"),
        ("colour = red", "unknown field 'colour'; filterable: dead_letter, notification_type"),
        ("State = x", "expected a field name at character 1"),
        ("(state = x)", "expected a field name at character 1"),
        ("state = x OR state = y", "expected AND at character 11"),
        ("source = a\x00", "must not contain NUL characters"),
        ("x" * (FILTER_MAX_CHARS + 1), f"must be at most {FILTER_MAX_CHARS} characters"),
    ],
)
def test_refuses(text: str, problem: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse(text, FIELDS)
    error = caught.value
    assert problem in error.message
    assert [v.field for v in error.violations] == ["filter"]
    assert error.metadata == {"fields": "filter"}


def test_a_refused_field_names_its_replacement_when_hinted() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse("status = FAILED", FIELDS, hints={"status": "state"})
    assert (
        "unknown field 'status' (the API calls it `state`, e.g. `state = FAILED`)"
        in caught.value.message
    )


def test_an_error_quotes_only_a_bounded_part_of_the_input() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse("state = x " + "y" * 4000, FIELDS)
    assert len(caught.value.message) < 300


def render(terms: list[tuple[str, str]]) -> str:
    return " AND ".join(
        f'{name} = "' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        for name, value in terms
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(FIELDS),
            st.text(alphabet=st.sampled_from(['"', "\\", " ", "A", "N", "D", "=", "é"]))
            | st.text(),
        ),
        max_size=5,
    )
)
def test_quoted_values_round_trip(terms: list[tuple[str, str]]) -> None:
    text = render(terms)
    if "\x00" in text or len(text) > FILTER_MAX_CHARS:
        return
    assert parse(text, FIELDS) == [Term(name, value, True) for name, value in terms]


# Long runs of the characters that made regex parsers backtrack: whitespace, quotes,
# backslashes, parentheses, operators and the keyword itself, repeated up to past the cap.
PIECES = [" ", "\t", '"', "\\", "(", ")", "=", "!=", "AND", " AND ", "state", "x", '\\"', "\n"]
hostile = st.lists(
    st.tuples(st.sampled_from(PIECES), st.integers(1, FILTER_MAX_CHARS)), min_size=1, max_size=6
).map(lambda runs: "".join(piece * count for piece, count in runs))


@settings(max_examples=300, deadline=None)
@given(st.one_of(hostile, st.text(max_size=200)))
def test_any_text_parses_or_is_refused_as_a_bad_filter(text: str) -> None:
    try:
        terms = parse(text, FIELDS)
    except InvalidRequest as exc:
        assert [v.field for v in exc.violations] == ["filter"]
        assert len(exc.message) < 600  # readable, however long the input
    else:
        assert len(text) <= FILTER_MAX_CHARS
        assert all(term.field in FIELDS for term in terms)

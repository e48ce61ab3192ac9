"""AIP-158 page sizes and the page-token codec every listing shares."""

from __future__ import annotations

import base64

import pytest

from uns_server.domain import paging
from uns_server.domain.errors import InvalidRequest


@pytest.mark.parametrize(
    ("page_size", "limit"), [(0, 50), (1, 1), (1000, 1000), (1001, 1000), (2**31 - 1, 1000)]
)
def test_page_limit_defaults_and_coerces(page_size: int, limit: int) -> None:
    assert paging.page_limit(page_size) == limit


def test_negative_page_size_is_refused() -> None:
    with pytest.raises(InvalidRequest) as exc:
        paging.page_limit(-1)
    assert [v.field for v in exc.value.violations] == ["page_size"]


def test_tokens_round_trip() -> None:
    token = paging.encode_token(1, "demo.alert", "é")
    assert "=" not in token
    assert paging.decode_token(token, 3) == [1, "demo.alert", "é"]


@pytest.mark.parametrize(
    "token",
    [
        "garbage!",
        "\u00e9",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        base64.urlsafe_b64encode(b"[1, 2").decode(),  # not JSON
        base64.urlsafe_b64encode(b'{"a": 1}').decode(),  # not an array
        base64.urlsafe_b64encode(b"[1, 2, 3]").decode(),  # the wrong length
        base64.urlsafe_b64encode(b"[" * 100_000).decode(),  # nested past the parser's depth
    ],
)
def test_foreign_tokens_are_value_errors(token: str) -> None:
    with pytest.raises(ValueError):
        paging.decode_token(token, 2)

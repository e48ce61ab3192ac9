"""Action-link tokens: what they bind, expiry, tampering, key rotation, form nonces."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from uns_server.domain.links import LinkClaims, LinkSigner, outlives, token_hash

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
OLD, NEW = "old-key-" + "o" * 32, "new-key-" + "n" * 32
CLAIMS = LinkClaims("nid-1", ("ack",), "email:oncall@example.com", NOW + timedelta(minutes=30))


def test_a_token_carries_exactly_its_claims_until_it_expires() -> None:
    signer = LinkSigner([NEW])
    token = signer.issue(CLAIMS)
    assert signer.verify(token, NOW) == CLAIMS
    assert signer.verify(token, CLAIMS.expires_at - timedelta(seconds=1)) == CLAIMS
    assert signer.verify(token, CLAIMS.expires_at) is None


def test_past_its_expiry_a_link_lives_only_while_owed_and_before_the_moved_deadline() -> None:
    signer = LinkSigner([NEW])
    token = signer.issue(CLAIMS)
    later = CLAIMS.expires_at + timedelta(minutes=10)
    assert signer.verify(token, later) is None and signer.read(token) == CLAIMS
    lease = timedelta(minutes=1)
    moved = NOW + timedelta(hours=2)  # a snooze moved the deadline

    def alive(at: datetime, owed: bool, deadline: datetime | None = moved) -> bool:
        return outlives(CLAIMS, ack_owed=owed, deadline=deadline, lease=lease, now=at)

    assert alive(NOW, owed=False)  # its own expiry holds whatever the row says
    assert alive(later, owed=True)
    assert not alive(later, owed=False)  # the obligation ended
    assert not alive(later, owed=True, deadline=None)
    assert alive(moved + lease - timedelta(seconds=1), owed=True)
    assert not alive(moved + lease, owed=True)
    assert signer.read("".join(reversed(token))) is None


@pytest.mark.parametrize("position", [0, 10, -1, -20])
def test_any_changed_character_voids_the_token(position: int) -> None:
    signer = LinkSigner([NEW])
    token = signer.issue(CLAIMS)
    chars = list(token)
    chars[position] = "A" if chars[position] != "A" else "B"
    assert signer.verify("".join(chars), NOW) is None


def test_rotation_verifies_old_links_and_signs_with_the_new_key() -> None:
    old_token = LinkSigner([OLD]).issue(CLAIMS)
    rotating = LinkSigner([NEW, OLD])
    assert rotating.verify(old_token, NOW) == CLAIMS
    new_token = rotating.issue(CLAIMS)
    assert LinkSigner([NEW]).verify(new_token, NOW) == CLAIMS
    assert LinkSigner([OLD]).verify(new_token, NOW) is None
    assert LinkSigner([NEW]).verify(old_token, NOW) is None  # old key dropped: link dead


def test_garbage_is_refused_the_same_way() -> None:
    signer = LinkSigner([NEW])
    for junk in ("", ".", "abc.def", "eyJuIjoxfQ.x" * 3, "%00"):
        assert signer.verify(junk, NOW) is None


def test_form_nonces_bind_token_browser_and_age() -> None:
    signer = LinkSigner([NEW, OLD])
    token = signer.issue(CLAIMS)
    nonce = signer.form_nonce(token, "browser-1", NOW)
    assert signer.check_form_nonce(nonce, token, "browser-1", NOW + timedelta(minutes=5))
    assert not signer.check_form_nonce(nonce, token, "browser-2", NOW)
    assert not signer.check_form_nonce(nonce, token + "x", "browser-1", NOW)
    assert not signer.check_form_nonce(nonce, token, "browser-1", NOW + timedelta(hours=2))
    assert not signer.check_form_nonce("", token, "browser-1", NOW)
    assert not signer.check_form_nonce(nonce, token, "", NOW)


def test_tokens_are_remembered_only_as_hashes() -> None:
    token = LinkSigner([NEW]).issue(CLAIMS)
    digest = token_hash(token)
    assert len(digest) == 64 and token not in digest

"""Provider signatures: Slack v0 (timestamped) and PagerDuty v1 (rotating secrets)."""

from __future__ import annotations

import hashlib
import hmac

from uns_server.domain.signatures import (
    pagerduty_signature,
    slack_signature,
    verify_pagerduty,
    verify_slack,
)

BODY = b"payload=%7B%22type%22%3A%22block_actions%22%7D"
NOW = 1_800_000_000.0


def test_slack_signature_is_v0_hmac_of_timestamp_and_body() -> None:
    expected = hmac.new(b"s3cret", b"v0:1800000000:" + BODY, hashlib.sha256).hexdigest()
    assert slack_signature("s3cret", "1800000000", BODY) == "v0=" + expected


def test_slack_accepts_only_fresh_matching_signatures() -> None:
    ts = str(int(NOW))
    good = slack_signature("s3cret", ts, BODY)
    assert verify_slack(["other", "s3cret"], ts, good, BODY, NOW)
    assert verify_slack(["s3cret"], ts, good, BODY, NOW + 300)
    assert not verify_slack(["s3cret"], ts, good, BODY, NOW + 301)  # stale
    assert not verify_slack(["s3cret"], ts, good, BODY + b"x", NOW)  # body changed
    assert not verify_slack(["s3cret"], str(int(NOW) + 1), good, BODY, NOW)  # ts changed
    assert not verify_slack(["wrong"], ts, good, BODY, NOW)
    assert not verify_slack([], ts, good, BODY, NOW)
    assert not verify_slack(["s3cret"], None, good, BODY, NOW)
    assert not verify_slack(["s3cret"], "-1", good, BODY, NOW)


def test_pagerduty_accepts_any_of_several_signatures() -> None:
    body = b'{"event":{"event_type":"incident.acknowledged"}}'
    expected = hmac.new(b"pd-secret", body, hashlib.sha256).hexdigest()
    assert pagerduty_signature("pd-secret", body) == "v1=" + expected
    header = f"v1=deadbeef, {pagerduty_signature('pd-secret', body)}"
    assert verify_pagerduty(["pd-secret"], header, body)
    assert verify_pagerduty(["old", "pd-secret"], pagerduty_signature("old", body), body)
    assert not verify_pagerduty(["pd-secret"], "v1=deadbeef", body)
    assert not verify_pagerduty(["pd-secret"], header, body + b" ")
    assert not verify_pagerduty(["pd-secret"], None, body)
    assert not verify_pagerduty([], header, body)

"""What a non-operator reads of an event of a person's message (issue 42): the person
(``recipient:<id>``) wherever the payload names their address; an event that names no
person's address is shared as it is."""

from __future__ import annotations

from uns_server.domain.personal import redacted_payload


def test_a_payload_without_a_persons_message_is_left_alone() -> None:
    shared = {
        "channel": "team-mail",
        "error": "all recipients refused: 550 <ops@example.com>: no such user",
        "provider_reference": {"recipient": "email:ops@example.com"},  # a channel's own
        "results": [{"channel": "hook", "error": None}],
    }
    assert redacted_payload(shared) is None


def test_a_persons_address_becomes_the_person() -> None:
    attempt = {
        "channel": "mail",
        "route": "mail@dave",
        "recipient_id": "dave",
        "error": "all recipients refused: 550 5.1.1 <dave.smith@example.com>: no such user",
        "metadata": {"refused_recipients": ["dave.smith@example.com"], "smtp_codes": [550]},
        "provider_reference": {"recipient": "email:dave.smith@example.com", "recipient_id": "dave"},
    }
    original = repr(attempt)
    redacted = redacted_payload(attempt)
    assert redacted == {
        **attempt,
        "error": "all recipients refused: 550 5.1.1 <recipient:dave>: no such user",
        "metadata": {"refused_recipients": ["recipient:dave"], "smtp_codes": [550]},
        "provider_reference": {"recipient": "recipient:dave", "recipient_id": "dave"},
    }
    assert repr(attempt) == original  # the shared payload (the operators') is untouched


def test_each_result_of_a_follow_up_names_its_own_person() -> None:
    step = {
        "recipient_ids": ["dave", "erin"],
        "results": [
            {"channel": "mail", "route": "mail@dave", "recipient_id": "dave", "error": None},
            {
                "channel": "mail",
                "route": "mail@erin",
                "recipient_id": "erin",
                "error": "SMTP 550 mailbox erin@example.org unavailable",
            },
        ],
    }
    redacted = redacted_payload(step)
    assert redacted is not None
    assert [r["error"] for r in redacted["results"]] == [
        None,
        "SMTP 550 mailbox recipient:erin unavailable",
    ]


def test_an_outcomes_error_message_keeps_channels_and_names_people() -> None:
    """``domain.lifecycle`` joins each failed channel's error as ``<route>: <error>``;
    a person's route (``<channel>@<id>[+<n>]``) is kept, the address it quotes is not,
    and a channel's own error (its configured address is no person's) is as it was."""
    settled = {
        "status": "FAILED",
        "outcome": {
            "error_message": "mail@dave.smith: all recipients refused: 550 "
            "<dave.smith@example.com>: no such user; team: 550 <ops@example.com>: full; "
            "mail@erin+2: SMTP 550 see erin@example.org; more for erin@example.org"
        },
    }
    redacted = redacted_payload(settled)
    assert redacted is not None
    assert redacted["outcome"]["error_message"] == (
        "mail@dave.smith: all recipients refused: 550 <recipient:dave.smith>: no such user; "
        "team: 550 <ops@example.com>: full; "
        "mail@erin+2: SMTP 550 see recipient:erin; more for recipient:erin"
    )
    assert redacted_payload({"outcome": {"error_message": "hook: HTTP 503"}}) is None


def test_a_telegram_chat_and_presser_become_the_person() -> None:
    answered = {
        "actor": "recipient:alice",
        "via": "telegram",
        "recipient_id": "alice",
        "metadata": {
            "telegram_user_id": "123456789",
            "telegram_username": "alice_t",
            "telegram_chat_id": "123456789",
        },
    }
    assert redacted_payload(answered) == {
        **answered,
        "metadata": dict.fromkeys(answered["metadata"], "recipient:alice"),
    }
    sent = {"recipient_id": "alice", "provider_reference": {"telegram_chat_id": "-100777"}}
    assert redacted_payload(sent) == {
        "recipient_id": "alice",
        "provider_reference": {"telegram_chat_id": "recipient:alice"},
    }
    # Someone else's press (no person): who pressed is the actor, as for Slack.
    assert (
        redacted_payload({"actor": "telegram:4242", "metadata": {"telegram_user_id": "4242"}})
        is None
    )


def test_a_phone_number_twilio_quotes_becomes_the_person() -> None:
    attempt = {
        "channel": "sms",
        "route": "sms@dave",
        "recipient_id": "dave",
        "error": "HTTP 400: The 'To' number +14155552671 is not a valid phone number.",
        "provider_reference": {"recipient": "sms:+14155552671", "recipient_id": "dave"},
    }
    redacted = redacted_payload(attempt)
    assert redacted is not None
    assert (
        redacted["error"] == "HTTP 400: The 'To' number recipient:dave is not a valid phone number."
    )
    assert redacted["provider_reference"]["recipient"] == "recipient:dave"
    outcome = {"outcome": {"error_message": "sms@dave: HTTP 400: number +14155552671 is blocked"}}
    redacted = redacted_payload(outcome)
    assert redacted is not None
    assert (
        redacted["outcome"]["error_message"]
        == "sms@dave: HTTP 400: number recipient:dave is blocked"
    )

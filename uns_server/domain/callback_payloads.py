"""The signed provider payloads UNS reads, type-checked into values.

A provider's signature says who sent a payload, not that its fields have the types
its documentation gives: a signed Slack press whose ``user.id`` was ``{"x": 1}`` once
settled an obligation as ``slack:{'x': 1}``. Each parser returns a value whose every
field is checked (type, length, and text a database can hold: ``domain.fields``), or
raises ``MalformedCallback`` (the transport answers 400 and changes nothing). Fields UNS does
not read are not checked; in particular Slack's ``channel.id`` is never read: the
Slack channel that posted a message is what UNS recorded when it posted
(``ProviderRef``), never what the payload claims.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from uns_server.domain.fields import has_lone_surrogate, text_problems

NAME_MAX_CHARS = 255
"""A provider's user name, team or incident id, response URL (``acked_by`` is 255)."""
TOKEN_MAX_CHARS = 4096
"""A button's value: an action-link token."""
# Slack user and team ids (U0ADA, W012A3CDE, T0TEAM) and PagerDuty object ids (PXPGF42).
_PROVIDER_ID = re.compile(r"[A-Za-z0-9]{1,64}")


class MalformedCallback(ValueError):
    """A signed payload that does not have the shape UNS reads."""


def _text(container: Mapping[str, Any], key: str, max_chars: int = NAME_MAX_CHARS) -> str:
    """An optional string field ("" when absent or null)."""
    value = container.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or text_problems(value, max_chars) or has_lone_surrogate(value):
        raise MalformedCallback(f"{key} must be text of at most {max_chars} characters")
    return value


def _provider_id(container: Mapping[str, Any], key: str, *, required: bool) -> str:
    value = container.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or _PROVIDER_ID.fullmatch(value) is None:
        raise MalformedCallback(f"{key} must be a provider id (letters and digits)")
    return value


def _object(value: Any, what: str, *, optional: bool = False) -> Mapping[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise MalformedCallback(f"{what} must be an object")
    return value


@dataclass(frozen=True)
class SlackAction:
    action_id: str
    value: str


@dataclass(frozen=True)
class SlackUser:
    """Who pressed: ``id`` is always a Slack id; the others "" when Slack sent none."""

    id: str
    name: str
    team_id: str


@dataclass(frozen=True)
class SlackInteraction:
    """A ``block_actions`` interaction: who pressed which buttons, and where to reply."""

    user: SlackUser
    actions: tuple[SlackAction, ...]
    response_url: str


def slack_interaction(payload: Any) -> SlackInteraction | None:
    """The ``block_actions`` interaction in Slack's decoded ``payload``; None for another
    kind of interaction (UNS ignores those); ``MalformedCallback`` when it is not one Slack
    could have sent."""
    payload = _object(payload, "the payload")
    kind = payload.get("type")
    if not isinstance(kind, str):
        raise MalformedCallback("type must be text")
    if kind != "block_actions":
        return None
    user = _object(payload.get("user"), "user")
    _object(payload.get("channel"), "channel", optional=True)  # its shape only: never read
    actions = payload.get("actions")
    if not isinstance(actions, list):
        raise MalformedCallback("actions must be a list")
    parsed = []
    for action in actions:
        action = _object(action, "each action")
        parsed.append(
            SlackAction(_text(action, "action_id"), _text(action, "value", TOKEN_MAX_CHARS))
        )
    return SlackInteraction(
        SlackUser(
            _provider_id(user, "id", required=True),
            _text(user, "username") or _text(user, "name"),
            _provider_id(user, "team_id", required=False),
        ),
        tuple(parsed),
        _text(payload, "response_url", TOKEN_MAX_CHARS),
    )


@dataclass(frozen=True)
class PagerDutyEvent:
    """A v3 webhook event: its type, the incident's key and id, and the acting user
    (``agent_id`` "" when the event names none)."""

    event_type: str
    incident_key: str
    incident_id: str
    agent_id: str
    agent_name: str


PAGERDUTY_ANSWERS = frozenset({"incident.acknowledged", "incident.resolved"})
"""The incident events that answer an obligation; others are acknowledged and ignored."""


def pagerduty_event(envelope: Any) -> PagerDutyEvent | None:
    """The ``event`` of a v3 webhook envelope when it is one of ``PAGERDUTY_ANSWERS``;
    None for another event (not read further); ``MalformedCallback`` otherwise."""
    event = _object(_object(envelope, "the envelope").get("event"), "event")
    if _text(event, "event_type") not in PAGERDUTY_ANSWERS:
        return None
    data = _object(event.get("data"), "event.data", optional=True)
    agent = _object(event.get("agent"), "event.agent", optional=True)
    return PagerDutyEvent(
        _text(event, "event_type"),
        _text(data, "incident_key"),
        _text(data, "id"),
        _provider_id(agent, "id", required=False),
        _text(agent, "summary"),
    )

"""Alertmanager's webhook payload (and Grafana's, the same shape) read into sends.

What Alertmanager posts to a ``webhook_configs`` receiver: ``version`` "4", the group
(``groupKey``, ``status``, ``receiver``, ``groupLabels``, ``commonLabels``,
``commonAnnotations``, ``externalURL``, ``truncatedAlerts``) and ``alerts``, each with
``status`` (firing or resolved), ``labels``, ``annotations``, ``startsAt``, ``endsAt``,
``generatorURL`` and ``fingerprint`` (a hash of the labels). Grafana's contact-point
webhook posts the same shape with ``version`` "1" and fields of its own (``orgId``,
``state``, ``title``, ``message``, ``values``, ``silenceURL``...), which are ignored, as
is every field UNS does not read.

Two levels of refusal: a body that is not such a payload (not an object, an unknown
``version``, no ``alerts`` list) raises ``MalformedAlerts`` and the whole request is refused;
an alert UNS cannot read (no type, no fingerprint, labels that are not text) is an
``AlertProblem`` of that alert alone, and the others go on (SPEC §7 "Alerts in").

Each alert becomes one send (``AlertSend``): the type from the ``type`` query parameter
else the ``uns_type`` label; the title from the ``summary`` annotation else the
``alertname`` label; the message from the ``description`` annotation else the labels as
``k=v`` lines; the labels as metadata; the idempotency key from ``fingerprint`` and
``startsAt`` (Alertmanager re-sends a firing alert every ``repeat_interval`` with the
same two: a replay, not a new page), the dedup key the fingerprint. The resolved alert
carries the same send: its idempotency key finds the notification its firing created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from uns_server.domain.fields import has_lone_surrogate, text_problems
from uns_server.domain.validation import KEY_MAX_CHARS, MESSAGE_MAX_CHARS, TITLE_MAX_CHARS

SOURCE = "alertmanager"
RESOLVED_REASON = "resolved at source"
FIRING, RESOLVED = "firing", "resolved"
# version -> who sends it. Grafana's unified alerting says "1" for the same shape.
VERSIONS = {"4": "Alertmanager", "1": "Grafana"}
TYPE_LABEL = "uns_type"
FINGERPRINT_MAX_CHARS = 128
STARTS_AT_MAX_CHARS = 64  # RFC 3339 with nanoseconds and an offset is 35
LABEL_MAX_CHARS = 16384  # metadata as a whole is bounded by the server (16 KiB)
ELLIPSIS = "…"


@dataclass(frozen=True)
class AlertProblem:
    """Why one alert cannot be read: INVALID_REQUEST naming ``field``."""

    field: str
    description: str

    @property
    def message(self) -> str:
        return f"{self.field}: {self.description}"


class MalformedAlerts(ValueError):
    """The body is not an Alertmanager (or Grafana) webhook payload: every reason."""

    def __init__(self, problems: list[AlertProblem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class AlertSend:
    """The SendNotification an alert stands for (intent and source are fixed)."""

    notification_type: str
    title: str
    message: str
    metadata: Mapping[str, str]
    idempotency_key: str
    dedup_key: str


@dataclass(frozen=True)
class Alert:
    """One alert of the payload: ``send`` or ``problem``, never both."""

    status: str  # FIRING or RESOLVED ("" when it is the problem)
    fingerprint: str
    send: AlertSend | None = None
    problem: AlertProblem | None = None


def parse_webhook(document: Any, notification_type: str = "") -> list[Alert]:
    """The payload's alerts, in order; ``notification_type``: the ``type`` query
    parameter ("" when absent). Raises ``MalformedAlerts`` for a body that is no payload."""
    if not isinstance(document, dict):
        raise MalformedAlerts([AlertProblem("body", "must be a JSON object (a webhook payload)")])
    problems = []
    version = document.get("version")
    if version not in VERSIONS:
        problems.append(
            AlertProblem(
                "version",
                f"must be {' or '.join(map(repr, VERSIONS))} (Alertmanager's webhook payload "
                f"version 4, Grafana's 1), not {_shown(version)}",
            )
        )
    alerts = document.get("alerts")
    if not isinstance(alerts, list):
        problems.append(AlertProblem("alerts", "must be a list of alerts"))
    if problems or not isinstance(alerts, list):
        raise MalformedAlerts(problems)
    return [_alert(item, f"alerts[{i}]", notification_type) for i, item in enumerate(alerts)]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


class _Bad(Exception):
    def __init__(self, field: str, description: str) -> None:
        self.problem = AlertProblem(field, description)


def _alert(item: Any, at: str, notification_type: str) -> Alert:
    if not isinstance(item, dict):
        return Alert("", "", problem=AlertProblem(at, "must be an object"))
    fingerprint = item.get("fingerprint")
    shown = fingerprint if isinstance(fingerprint, str) else ""
    status = item.get("status")
    try:
        if status not in (FIRING, RESOLVED):
            raise _Bad(f"{at}.status", f"must be {FIRING!r} or {RESOLVED!r}")
        fingerprint = _text(item, "fingerprint", at, FINGERPRINT_MAX_CHARS)
        starts_at = _text(item, "startsAt", at, STARTS_AT_MAX_CHARS)
        labels = _strings(item, "labels", at)
        annotations = _strings(item, "annotations", at)
        chosen = notification_type or labels.get(TYPE_LABEL, "")
        if not chosen.strip():
            raise _Bad(
                f"{at}.labels.{TYPE_LABEL}",
                f"is required: set the ?type= query parameter or the {TYPE_LABEL} label",
            )
    except _Bad as bad:
        return Alert(status if status in (FIRING, RESOLVED) else "", shown, problem=bad.problem)
    title = _first(annotations.get("summary"), labels.get("alertname"), f"alert {fingerprint}")
    message = _first(annotations.get("description"), _rendered(labels), title)
    send = AlertSend(
        notification_type=chosen,
        title=_cut(title, TITLE_MAX_CHARS),
        message=_cut(message, MESSAGE_MAX_CHARS),
        metadata=labels,
        # At most 128 + 1 + 64 characters: within the key's 255.
        idempotency_key=f"{fingerprint}@{starts_at}",
        dedup_key=fingerprint,
    )
    return Alert(status, fingerprint, send=send)


def _text(item: Mapping[str, Any], key: str, at: str, max_chars: int) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _Bad(f"{at}.{key}", "is required (text)")
    problems = text_problems(value, max_chars)
    if problems or has_lone_surrogate(value):
        raise _Bad(f"{at}.{key}", "; ".join(problems) or "must be valid Unicode text")
    return value


def _strings(item: Mapping[str, Any], key: str, at: str) -> dict[str, str]:
    """An object of text values ({} when absent): labels and annotations."""
    value = item.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"{at}.{key}", "must be an object of text values")
    for name, text in value.items():
        if not isinstance(text, str):
            raise _Bad(f"{at}.{key}.{name}", "must be text")
        if has_lone_surrogate(name) or has_lone_surrogate(text):
            raise _Bad(f"{at}.{key}", "must be valid Unicode text")
        problems = text_problems(name, KEY_MAX_CHARS) + text_problems(text, LABEL_MAX_CHARS)
        if problems:
            raise _Bad(f"{at}.{key}.{name}", "; ".join(problems))
    return dict(value)


def _first(*texts: str | None) -> str:
    """The first text that is not blank (the server refuses a blank title or message)."""
    return next(text for text in texts if text and text.strip())


def _rendered(labels: Mapping[str, str]) -> str:
    """The labels as ``k=v`` lines, by name: the message of an alert without one."""
    return "\n".join(f"{name}={labels[name]}" for name in sorted(labels))


def _cut(text: str, max_chars: int) -> str:
    """At most ``max_chars``: an over-long annotation is shortened, not refused (the
    alert still pages; the whole text stays in Alertmanager)."""
    return text if len(text) <= max_chars else text[: max_chars - 1] + ELLIPSIS

"""Errors every ``uns-admin`` command may raise, whichever mode it runs in."""

from __future__ import annotations

from uns_server.domain.errors import InvalidRequest


class UsageError(Exception):
    """Bad input from the command line or a file: exit 2."""


def describe(error: InvalidRequest) -> str:
    """One line for an invalid input: its field violations, or its message."""
    if error.violations:
        return "; ".join(f"{v.field}: {v.description}" for v in error.violations)
    return error.message

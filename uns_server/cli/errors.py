"""Errors every ``uns-admin`` command may raise, whichever mode it runs in."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the command line or a file: exit 2."""

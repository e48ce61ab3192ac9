"""Errors every ``uns-admin`` command may raise, whichever mode it runs in."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from uns_server.domain.errors import InvalidRequest


class UsageError(Exception):
    """Bad input from the command line or a file: exit 2."""


def describe(error: InvalidRequest) -> str:
    """One line for an invalid input: its field violations, or its message."""
    if error.violations:
        return "; ".join(f"{v.field}: {v.description}" for v in error.violations)
    return error.message


def quiet_when_the_reader_leaves(run: Callable[[], object]) -> None:
    """Run a command's ``main``; a reader that stopped reading (``uns-admin ... | head``)
    ends it quietly with status 0, as it ends ``cat``, instead of a traceback.

    Output still buffered is flushed here, inside the guard (at interpreter exit a
    failed flush would print "Exception ignored"); after a broken pipe, stdout is
    pointed at /dev/null so that nothing tries to write to the pipe again.
    """
    try:
        try:
            run()
        finally:
            sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(0) from None

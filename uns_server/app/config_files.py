"""Reading the server's YAML/JSON files (--channels-file, --api-keys-file) at start.

A mistake in one of them stops the server, so the message must lead straight to it:
which file, which line and column (for a syntax error), and which flag named the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from uns_server.settings import SettingsError

T = TypeVar("T")


def flag_of(setting: str) -> str:
    """``channels_file`` -> ``--channels-file (UNS_CHANNELS_FILE)``."""
    return f"--{setting.replace('_', '-')} (UNS_{setting.upper()})"


def load(path: str, setting: str, parse: Callable[[Any], T]) -> T:
    """The file at ``path`` (given by ``setting``) as YAML/JSON, then ``parse(data)``.

    Every failure is a ``SettingsError`` naming the file and the flag; a syntax error
    also names the line and column, as YAML reports them.
    """
    flag = flag_of(setting)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SettingsError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise SettingsError(
            f"{path}{where}: not valid YAML/JSON: {problem} (given by {flag})"
        ) from exc
    try:
        return parse(data)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        detail = " ".join(str(exc).split())
        if isinstance(exc, KeyError):
            detail = f"an entry lacks {detail}"
        raise SettingsError(f"{path}: {detail} (given by {flag})") from exc

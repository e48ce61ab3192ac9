"""The ListNotifications filter language: an AIP-160 subset, parsed in linear time.

Grammar::

    filter = [ term { "AND" term } ]
    term   = field "=" value
    field  = name [ "." key ]
    name   = [a-z_]+
    key    = [A-Za-z0-9_.-]+        (only after a name the caller allows a key on)
    value  = quoted | bare
    quoted = '"' { any character but '"' and '\\' | '\\' any character } '"'
    bare   = [A-Za-z0-9_.:-]+

Whitespace separates tokens and is otherwise ignored; ``AND`` is a keyword only between
terms, so a quoted value may hold ``AND`` (and ``\\"``, ``\\\\``). The scanner looks at
each character once and never backtracks, and the text is capped at ``FILTER_MAX_CHARS``
before it is read: a request's cost does not depend on how hostile its filter is (the
regex-split parser this replaces was quadratic on long runs of whitespace).

Pure: the caller says which fields exist, and which of them take a key
(``metadata.cluster``, the routing rules of ``domain.policy.rules``); checking values
against their columns (enums, booleans) is ``services.queries``' job.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from uns_server.domain.errors import InvalidRequest

FILTER_MAX_CHARS = 4096
# Input quoted back in an error message: a whole filter would make the status trailers
# too large for the client to read the error at all (grpc drops trailers over 16 KiB).
ECHO_MAX_CHARS = 64
FIELD = "filter"
_FIELD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")
_BARE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.:-")
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_SPACE = frozenset(" \t\r\n\f\v")
USAGE = 'use `field = value [AND field = "quoted value" ...]`'


@dataclass(frozen=True)
class Term:
    field: str
    value: str
    quoted: bool


def echo(value: str) -> str:
    """``value`` quoted for an error message, cut to ``ECHO_MAX_CHARS`` characters."""
    if len(value) <= ECHO_MAX_CHARS:
        return repr(value)
    return repr(value[:ECHO_MAX_CHARS]) + f"... ({len(value)} characters)"


class _Scanner:
    def __init__(self, text: str, field: str = FIELD) -> None:
        self.text = text
        self.pos = 0
        self.field = field

    def invalid(self, description: str) -> InvalidRequest:
        return InvalidRequest.of_field(self.field, description)

    def skip_space(self) -> bool:
        """Skips whitespace; True if there was any."""
        start = self.pos
        text, n = self.text, len(self.text)
        while self.pos < n and text[self.pos] in _SPACE:
            self.pos += 1
        return self.pos > start

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def run(self, chars: frozenset[str]) -> str:
        start = self.pos
        text, n = self.text, len(self.text)
        while self.pos < n and text[self.pos] in chars:
            self.pos += 1
        return text[start : self.pos]

    def error(self, expected: str) -> InvalidRequest:
        if self.at_end():
            return self.invalid(f"expected {expected} at the end; {USAGE}")
        found = self.text[self.pos : self.pos + ECHO_MAX_CHARS]
        return self.invalid(
            f"expected {expected} at character {self.pos + 1}, found {echo(found)}; {USAGE}"
        )

    def quoted(self) -> str:
        """The value of a quoted string starting at ``pos`` (its escapes resolved)."""
        text, n = self.text, len(self.text)
        start = self.pos
        self.pos += 1
        out: list[str] = []
        chunk = self.pos
        while self.pos < n:
            c = text[self.pos]
            if c == '"':
                out.append(text[chunk : self.pos])
                self.pos += 1
                return "".join(out)
            if c == "\\":
                if self.pos + 1 >= n:
                    break
                out.append(text[chunk : self.pos])
                out.append(text[self.pos + 1])
                self.pos += 2
                chunk = self.pos
                continue
            self.pos += 1
        raise self.invalid(f"the quoted value opened at character {start + 1} is not closed")


def parse(
    text: str,
    fields: Collection[str],
    hints: Mapping[str, str] | None = None,
    *,
    keyed: Collection[str] = (),
    field: str = FIELD,
    max_chars: int = FILTER_MAX_CHARS,
) -> list[Term]:
    """``a = x AND b = "y"`` -> [Term(a, x), Term(b, y)]; INVALID_REQUEST (BadRequest
    field ``field``) on anything else, on a field not in ``fields``, on NUL, and on
    text longer than ``max_chars`` characters. ``hints`` maps a field a caller
    may mistakenly try to the one to use instead (named in the refusal). A name in
    ``keyed`` is followed by ``.<key>`` (``metadata.cluster``: the term's field)."""
    s = _Scanner(text, field)
    if len(text) > max_chars:
        raise s.invalid(f"must be at most {max_chars} characters (got {len(text)})")
    if "\x00" in text:  # PostgreSQL cannot even compare a text value holding NUL
        raise s.invalid("must not contain NUL characters")
    terms: list[Term] = []
    s.skip_space()
    if s.at_end():
        return terms
    while True:
        name = s.run(_FIELD_CHARS)
        if not name:
            raise s.error("a field name")
        if name in keyed:
            if not s.text.startswith(".", s.pos):
                raise s.error(f"'.' and a key after {name!r} (e.g. `{name}.cluster`)")
            s.pos += 1
            key = s.run(_KEY_CHARS)
            if not key:
                raise s.error(f"a {name} key (letters, digits, '_', '.', '-')")
            name = f"{name}.{key}"
        elif name not in fields:
            hint = (hints or {}).get(name)
            raise s.invalid(
                f"unknown field {echo(name)}"
                + (f" (the API calls it `{hint}`, e.g. `{hint} = FAILED`)" if hint else "")
                + "; filterable: "
                + ", ".join(sorted([*fields, *(f"{k}.<key>" for k in keyed)]))
            )
        s.skip_space()
        if s.text.startswith("=", s.pos):
            s.pos += 1
        else:
            raise s.error("'='")
        s.skip_space()
        if s.text.startswith('"', s.pos):
            terms.append(Term(name, s.quoted(), quoted=True))
        else:
            value = s.run(_BARE_CHARS)
            if not value:
                raise s.error("a value")
            terms.append(Term(name, value, quoted=False))
        spaced = s.skip_space()
        if s.at_end():
            return terms
        if not spaced or not s.text.startswith("AND", s.pos):
            raise s.error("AND")
        s.pos += 3
        if s.at_end():
            raise s.error("a term after AND")
        if not s.skip_space():
            raise s.error("whitespace after AND")

"""Capture the SQL one SendNotification really commits, and turn it into a pgbench script.

The server runs against a database with ``log_statement = 'all'``; PostgreSQL then logs
each statement the accept transaction executes (``execute <stmt>: SQL`` plus a
``DETAIL: Parameters: $1 = '...'`` line with SQL-quoted values). We keep the statements
from the ``BEGIN`` before ``INSERT INTO uns_notifications`` to its ``COMMIT`` (or that
statement alone, when it is sent outside a transaction block) and
substitute the parameters back in, replacing ids and keys with fresh random values per
transaction (the unique indexes would refuse a repeat) and timestamps with ``now()``.
So the pgbench baseline runs exactly the statements of the code under test, whatever
they are today, not a hand-written guess. We take the last such transaction in the log
that is free of asyncpg's one-time type introspection (a connection's first use of an
array type): that is the steady state every later accept runs.

Array parameters (``'{a,"b c",NULL}'``: rows ride in a statement as ``unnest`` of one
array per column) are parsed, and an array holding an id, key or timestamp becomes
``ARRAY[...]`` of per-element expressions. pgbench (``-M prepared``) reads every
``:name`` in a command as a variable, inside string literals too (``12:41:45``,
``"a":null``), so a literal holding ``:`` is written as ``E'...'`` with ``\x3a``.

Fresh values come from pgbench variables through immutable functions (``md5(:v1::text)``):
a volatile expression such as ``random()`` in a WHERE clause would defeat the index and
turn the idempotency lookup into a sequential scan. One captured value maps to one
variable, so a notification id used twice (row and event) stays the same id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypeAlias

_ENTRY = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+ \S+ \[(\d+)\] ([A-Z]+):  (.*)$")
_STATEMENT = re.compile(r"^(?:statement|execute [^:]+): (.*)$", re.S)
_PARAM_NAME = re.compile(r"\$(\d+) = ")
_PLACEHOLDER = re.compile(r"\$(\d+)(?!\d)")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?([+-]\d\d(:\d\d)?)?$")
# asyncpg's one-time work on a connection's first use of a type it has no codec for
# (arrays of varchar, timestamptz, ...): the catalog query, with JIT off around it.
_DRIVER_MARKS = ("typeinfo_tree", "set_config('jit'")

RANDOM_MAX = 9_000_000_000_000_000_000


_VARIABLE = re.compile(r"[A-Za-z0-9_\u0080-\U0010ffff]+")

# An array element: text, NULL or a sub-array.
Element: TypeAlias = "str | list[Element] | None"


@dataclass
class Statement:
    sql: str
    params: dict[int, str] = field(default_factory=dict)  # SQL literal text or NULL
    at: int = 0  # its entry's index in the log: orders statements across backends

    def verb(self) -> str:
        words = self.sql.split()
        return " ".join(words[:3]) if words else ""

    def is_driver_introspection(self) -> bool:
        return any(mark in self.sql for mark in _DRIVER_MARKS)


def parse_log(text: str) -> dict[int, list[Statement]]:
    """Statements per backend pid, in order, with their parameters attached."""
    entries: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match:
            entries.append((int(match[1]), match[2], match[3]))
        elif entries:
            pid, level, message = entries[-1]
            entries[-1] = (pid, level, message + "\n" + line)
    by_pid: dict[int, list[Statement]] = {}
    for at, (pid, level, message) in enumerate(entries):
        statements = by_pid.setdefault(pid, [])
        if level == "LOG" and (m := _STATEMENT.match(message)):
            statements.append(Statement(m[1].strip().rstrip(";"), at=at))
        elif level == "DETAIL" and message.startswith("Parameters: ") and statements:
            statements[-1].params = parse_parameters(message[len("Parameters: ") :])
    return by_pid


def parse_parameters(text: str) -> dict[int, str]:
    """``$1 = 'a''b', $2 = NULL`` -> {1: "'a''b'", 2: "NULL"} (values stay SQL literals)."""
    out: dict[int, str] = {}
    i = 0
    while (m := _PARAM_NAME.match(text, i)) is not None:
        number, i = int(m[1]), m.end()
        if text.startswith("NULL", i):
            out[number], i = "NULL", i + 4
        elif text.startswith("'", i):
            j = i + 1
            while True:
                j = text.index("'", j)
                if text.startswith("''", j):
                    j += 2
                    continue
                break
            out[number], i = text[i : j + 1], j + 1
        else:
            raise ValueError(f"cannot parse parameter ${number} at {text[i : i + 20]!r}")
        if text.startswith(", ", i):
            i += 2
    return out


def parse_array(text: str) -> list[Element] | None:
    """PostgreSQL's array output syntax (``{a,"b \\"c\\"",NULL,{1,2}}``) -> its elements,
    or None when ``text`` is not one. Strict on purpose: a JSON object (``{"a": 1}``)
    is not an array, as a quoted element must be followed by ``,`` or ``}``."""
    try:
        items, end = _array_at(text, 0)
    except (ValueError, IndexError):
        return None
    return items if end == len(text) else None


def _array_at(text: str, i: int) -> tuple[list[Element], int]:
    if text[i] != "{":
        raise ValueError("not an array")
    i += 1
    items: list[Element] = []
    if text[i] == "}":
        return items, i + 1
    while True:
        item: Element
        if text[i] == "{":
            item, i = _array_at(text, i)
        elif text[i] == '"':
            item, i = _quoted_at(text, i + 1)
        else:
            j = i
            while text[j] not in ',{}"\\':
                j += 1
            if j == i:
                raise ValueError("empty element")
            item = None if text[i:j].upper() == "NULL" else text[i:j]
            i = j
        items.append(item)
        if text[i] == "}":
            return items, i + 1
        if text[i] != ",":
            raise ValueError("an element must be followed by ',' or '}'")
        i += 1


def _quoted_at(text: str, i: int) -> tuple[str, int]:
    """A double-quoted element's text from just after its opening quote: ``\\`` escapes."""
    out: list[str] = []
    while (c := text[i]) != '"':
        if c == "\\":
            i += 1
            c = text[i]
        out.append(c)
        i += 1
    return "".join(out), i + 1


def quote(text: str) -> str:
    """``text`` as an SQL literal in which pgbench sees no variable: a ``:`` is written
    as ``\\x3a`` in an ``E'...'`` literal (pgbench does not know SQL quoting)."""
    quoted = text.replace("'", "''")
    if ":" not in text:
        return f"'{quoted}'"
    return "E'" + quoted.replace("\\", "\\\\").replace(":", "\\x3a") + "'"


def pgbench_variables(sql: str) -> list[str]:
    """The ``:name`` pgbench reads as variables in a command, as its parser does
    (``::`` is skipped, quotes are not known); a digit may start a name here, as it
    could in older pgbench."""
    out: list[str] = []
    i = sql.find(":")
    while i != -1:
        if m := _VARIABLE.match(sql, i + 1):
            out.append(m[0])
            i = m.end()
        else:
            while i < len(sql) and sql[i] == ":":
                i += 1
        i = sql.find(":", i)
    return out


def accept_transaction(text: str) -> list[Statement]:
    """The last complete transaction in the log that inserts a notification, preferring
    one without asyncpg's type introspection (the steady state: that runs once per
    connection). When every one has it, the last one without those statements. An
    accept sent as one statement outside a transaction block (PostgreSQL runs it as its
    own transaction: ``Database.one_statement``) is a transaction of that statement."""
    found: list[list[Statement]] = []
    for statements in parse_log(text).values():
        begin: int | None = None
        for index, stmt in enumerate(statements):
            upper = stmt.sql.upper()
            # The row may ride in the events append, as a CTE of its statement.
            inserts = "INSERT INTO uns_notifications" in stmt.sql
            if upper == "BEGIN":
                begin = index
            elif upper == "COMMIT" and begin is not None:
                tx = statements[begin : index + 1]
                if any("INSERT INTO uns_notifications" in s.sql for s in tx):
                    found.append(tx)
                begin = None
            elif begin is None and inserts:
                found.append([stmt])
    if not found:
        raise LookupError("no accept transaction in the PostgreSQL log")
    found.sort(key=lambda tx: tx[-1].at)
    steady = [tx for tx in found if not any(s.is_driver_introspection() for s in tx)]
    if steady:
        return steady[-1]
    return [s for s in found[-1] if not s.is_driver_introspection()]


def _is_fresh(value: str) -> bool:
    return bool(_UUID.match(value) or _HEX64.match(value) or _TIMESTAMP.match(value))


def _holds_fresh(items: list[Element]) -> bool:
    return any(
        _holds_fresh(item) if isinstance(item, list) else item is not None and _is_fresh(item)
        for item in items
    )


# The accept's one-statement guard (``store.notifications._NewOnly``): each row's type
# beside the ACTIVE revision it was admitted under, "policy_id:revision".
_GUARD = re.compile(
    r"unnest\(\$(\d+)::[A-Z]+(?:\(\d+\))?\[\], \$(\d+)::text\[\]\)\)? "
    r"AS w\(notification_type, policy\)"
)


def _policy_refs(stmt: Statement) -> dict[str, str]:
    """The guard's "policy_id:revision" values in ``stmt``, by the type each stands for.
    Policy ids are made per database: the pgbench database has its own."""
    refs: dict[str, str] = {}
    for match in _GUARD.finditer(stmt.sql):
        types, under = (stmt.params.get(int(match[i]), "NULL") for i in (1, 2))
        if "NULL" in (types, under):
            continue
        kinds = parse_array(types[1:-1].replace("''", "'")) or []
        wanted = parse_array(under[1:-1].replace("''", "'")) or []
        for kind, ref in zip(kinds, wanted, strict=False):
            if isinstance(kind, str) and isinstance(ref, str) and ref:
                refs[ref] = kind
    return refs


class _Fresh:
    """Captured id/key values -> pgbench variables, one per distinct value."""

    def __init__(self) -> None:
        self.variables: dict[str, str] = {}
        # The statement's guard values (``_policy_refs``): each becomes the pgbench
        # database's own ACTIVE revision of that type, read when the statement runs.
        self.policy_refs: dict[str, str] = {}

    def policy_ref(self, value: str) -> str | None:
        kind = self.policy_refs.get(value)
        if kind is None:
            return None
        return (
            "(SELECT p.id || ':' || p.active_revision FROM uns_policies AS p "
            f"WHERE p.notification_type = {quote(kind)})"
        )

    def _var(self, value: str) -> str:
        return self.variables.setdefault(value, f"v{len(self.variables) + 1}")

    def expression(self, value: str) -> str:
        """One value (unquoted text) as the SQL that stands for it in every transaction."""
        if (ref := self.policy_ref(value)) is not None:
            return ref
        if _UUID.match(value):
            return f"md5(:{self._var(value)}::text)::uuid::text"
        if _HEX64.match(value):
            var = self._var(value)
            return f"md5(:{var}::text) || md5('k' || :{var}::text)"
        if _TIMESTAMP.match(value):
            return "now()"
        return quote(value)

    def parameter(self, literal: str) -> str:
        """A logged parameter (``NULL`` or a quoted literal). An array that holds an id,
        key or timestamp becomes ``ARRAY[...]`` (the statement's cast after it stays);
        any other array stays one literal, typed by its context as before."""
        if literal == "NULL":
            return literal
        value = literal[1:-1].replace("''", "'")
        items = parse_array(value) if value.startswith("{") else None
        if items is not None and (_holds_fresh(items) or self._holds_ref(items)):
            return "ARRAY" + self._elements(items)
        return self.expression(value)

    def _holds_ref(self, items: list[Element]) -> bool:
        return any(isinstance(item, str) and item in self.policy_refs for item in items)

    def _elements(self, items: list[Element]) -> str:
        parts = (
            self._elements(item)
            if isinstance(item, list)
            else "NULL"
            if item is None
            else self.expression(item)
            for item in items
        )
        return f"[{', '.join(parts)}]"

    def header(self) -> str:
        return "".join(f"\\set {var} random(1, {RANDOM_MAX})\n" for var in self.variables.values())


def to_sql(stmt: Statement, fresh: _Fresh) -> str:
    fresh.policy_refs = _policy_refs(stmt)

    def replace(match: re.Match[str]) -> str:
        number = int(match[1])
        if number not in stmt.params:
            raise ValueError(f"statement uses ${number} but the log has no value for it")
        return f"({fresh.parameter(stmt.params[number])})"

    return _PLACEHOLDER.sub(replace, stmt.sql)


def pgbench_script(transaction: list[Statement]) -> str:
    """One pgbench transaction: variables, then every statement ';'-terminated."""
    fresh = _Fresh()
    body = "".join(to_sql(stmt, fresh) + ";\n" for stmt in transaction)
    stray = sorted(set(pgbench_variables(body)) - set(fresh.variables.values()))
    if stray:  # pgbench would abort on them (or bind the wrong value)
        raise ValueError(f"the script reads as pgbench variables: {', '.join(stray)}")
    return fresh.header() + body


def _copy_element(fresh: _Fresh, value: str | None) -> str:
    """One element of a captured one-row array, as the SQL for copy ``g`` (a column of
    ``generate_series``): ids and keys fresh per transaction and per copy."""
    if value is None:
        return "NULL"
    if (ref := fresh.policy_ref(value)) is not None:
        return ref
    if _UUID.match(value):
        return f"md5(:{fresh._var(value)}::text || '.' || g)::uuid::text"
    if _HEX64.match(value):
        var = fresh._var(value)
        return f"md5(:{var}::text || '.' || g) || md5('k' || :{var}::text || '.' || g)"
    if _TIMESTAMP.match(value):
        return "now()::text"
    return quote(value)


def _copies(fresh: _Fresh, literal: str, copies: int) -> str:
    """A logged parameter for ``copies`` rows: an array's elements repeated ``copies``
    times (copy by copy, in order), a scalar as ``_Fresh.parameter`` writes it."""
    if literal == "NULL":
        return literal
    value = literal[1:-1].replace("''", "'")
    items = parse_array(value) if value.startswith("{") else None
    if items is None:
        return fresh.parameter(literal)
    if any(isinstance(item, list) for item in items):
        raise ValueError("a nested array parameter cannot be copied per row")
    elements = ", ".join(_copy_element(fresh, item) for item in items)  # type: ignore[arg-type]
    return (
        f"ARRAY(SELECT u.x FROM generate_series(1, {copies}) g, "
        f"unnest(ARRAY[{elements}]::text[]) WITH ORDINALITY AS u(x, j) ORDER BY g, u.j)"
    )


def batch_insert_script(transaction: list[Statement], copies: int) -> str:
    """The writes of a captured one-item batch as one pgbench transaction of ``copies``
    rows: its reads dropped, each remaining statement run once with every array
    parameter (one row per element, ``unnest``) repeated ``copies`` times and fresh ids
    and keys per copy. So the statement that inserts a batch's rows, events and lock
    is UNS's own, at the batch's size (the text stays that of one row: pgbench's
    variables and the server's plan do not grow with the batch)."""
    writes = [s for s in transaction if s.sql.upper() in ("BEGIN", "COMMIT") or "INSERT" in s.sql]
    if not any("INSERT INTO uns_notifications" in s.sql for s in writes):
        raise ValueError("the transaction inserts no notification")
    fresh = _Fresh()

    def to_batch_sql(stmt: Statement) -> str:
        fresh.policy_refs = _policy_refs(stmt)

        def replace(match: re.Match[str]) -> str:
            number = int(match[1])
            if number not in stmt.params:
                raise ValueError(f"statement uses ${number} but the log has no value for it")
            return f"({_copies(fresh, stmt.params[number], copies)})"

        return _PLACEHOLDER.sub(replace, stmt.sql)

    body = "".join(to_batch_sql(stmt) + ";\n" for stmt in writes)
    stray = sorted(set(pgbench_variables(body)) - set(fresh.variables.values()))
    if stray:
        raise ValueError(f"the script reads as pgbench variables: {', '.join(stray)}")
    return fresh.header() + body

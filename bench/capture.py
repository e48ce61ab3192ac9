"""Capture the SQL one SendNotification really commits, and turn it into a pgbench script.

The server runs against a database with ``log_statement = 'all'``; PostgreSQL then logs
each statement the accept transaction executes (``execute <stmt>: SQL`` plus a
``DETAIL: Parameters: $1 = '...'`` line with SQL-quoted values). We keep the statements
from the ``BEGIN`` before ``INSERT INTO uns_notifications`` to its ``COMMIT`` and
substitute the parameters back in, replacing ids and keys with fresh random values per
transaction (the unique indexes would refuse a repeat) and timestamps with ``now()``.
So the pgbench baseline runs exactly the statements of the code under test, whatever
they are today, not a hand-written guess.

Fresh values come from pgbench variables through immutable functions (``md5(:v1::text)``):
a volatile expression such as ``random()`` in a WHERE clause would defeat the index and
turn the idempotency lookup into a sequential scan. One captured value maps to one
variable, so a notification id used twice (row and event) stays the same id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ENTRY = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+ \S+ \[(\d+)\] ([A-Z]+):  (.*)$")
_STATEMENT = re.compile(r"^(?:statement|execute [^:]+): (.*)$", re.S)
_PARAM_NAME = re.compile(r"\$(\d+) = ")
_PLACEHOLDER = re.compile(r"\$(\d+)(?!\d)")
_UUID = re.compile(r"^'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'$")
_HEX64 = re.compile(r"^'[0-9a-f]{64}'$")
_TIMESTAMP = re.compile(r"^'\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")

RANDOM_MAX = 9_000_000_000_000_000_000


@dataclass
class Statement:
    sql: str
    params: dict[int, str] = field(default_factory=dict)  # SQL literal text or NULL

    def verb(self) -> str:
        words = self.sql.split()
        return " ".join(words[:3]) if words else ""


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
    for pid, level, message in entries:
        statements = by_pid.setdefault(pid, [])
        if level == "LOG" and (m := _STATEMENT.match(message)):
            statements.append(Statement(m[1].strip().rstrip(";")))
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


def accept_transaction(text: str) -> list[Statement]:
    """The first complete transaction in the log that inserts a notification."""
    for statements in parse_log(text).values():
        begin: int | None = None
        for index, stmt in enumerate(statements):
            upper = stmt.sql.upper()
            if upper == "BEGIN":
                begin = index
            elif upper == "COMMIT" and begin is not None:
                tx = statements[begin : index + 1]
                # The row may ride in the events append, as a CTE of its statement.
                if any("INSERT INTO uns_notifications" in s.sql for s in tx):
                    return tx
                begin = None
    raise LookupError("no accept transaction in the PostgreSQL log")


class _Fresh:
    """Captured id/key literals -> pgbench variables, one per distinct value."""

    def __init__(self) -> None:
        self.variables: dict[str, str] = {}

    def _var(self, value: str) -> str:
        return self.variables.setdefault(value, f"v{len(self.variables) + 1}")

    def literal(self, value: str) -> str:
        if _UUID.match(value):
            return f"md5(:{self._var(value)}::text)::uuid::text"
        if _HEX64.match(value):
            var = self._var(value)
            return f"md5(:{var}::text) || md5('k' || :{var}::text)"
        if _TIMESTAMP.match(value):
            return "now()"
        return value

    def header(self) -> str:
        return "".join(f"\\set {var} random(1, {RANDOM_MAX})\n" for var in self.variables.values())


def to_sql(stmt: Statement, fresh: _Fresh) -> str:
    def replace(match: re.Match[str]) -> str:
        number = int(match[1])
        if number not in stmt.params:
            raise ValueError(f"statement uses ${number} but the log has no value for it")
        return f"({fresh.literal(stmt.params[number])})"

    return _PLACEHOLDER.sub(replace, stmt.sql)


def pgbench_script(transaction: list[Statement]) -> str:
    """One pgbench transaction: variables, then every statement ';'-terminated."""
    fresh = _Fresh()
    body = "".join(to_sql(stmt, fresh) + ";\n" for stmt in transaction)
    return fresh.header() + body

"""PostgreSQL fast path: the statements every accept and delivery runs, sent by asyncpg.

SQLAlchemy Core spends 1.7-3.6x asyncpg's client CPU on a statement (parameters,
execution context, result rows; ``bench/sqlalchemy_overhead.py``), and on 2 cores
that CPU is the accept rate's ceiling (docs/PERFORMANCE.md). So the hot statements
are compiled once, at import, from the same schema (``store.tables``), and run on the
asyncpg connection under the SQLAlchemy one, inside its transaction (``store.db``).
SQLite, and every statement off the hot path, stays on SQLAlchemy Core.

Rows come back as asyncpg ``Record``s, read by column name like ``RowMapping``;
JSONB arrives decoded by the codec SQLAlchemy installs on each pooled connection,
timestamps as aware UTC datetimes. Errors are asyncpg's own: ``store.db``
classifies lost connections, ``sqlstate`` names the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import JSON, Table
from sqlalchemy.dialects.postgresql import asyncpg as sa_asyncpg
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

from uns_server.store import jsontext

# A row read by column name: a SQLAlchemy ``RowMapping`` (keyed by name or column,
# hence ``Any``) or an asyncpg ``Record``.
Row = Mapping[Any, Any]

_DIALECT = sa_asyncpg.dialect()  # type: ignore[no-untyped-call]
_NAMED = object()  # a parameter the caller passes by name


def driver(conn: AsyncConnection) -> Any | None:
    """The asyncpg connection under ``conn`` on PostgreSQL; None on SQLite."""
    if conn.dialect.name != "postgresql":
        return None
    sync = conn.sync_connection
    assert sync is not None, "connection not started"
    return sync.connection.driver_connection


def _encoder(column_type: Any) -> Any:
    # The JSONB codec takes text. Like SQLAlchemy's JSON type, None becomes JSON null,
    # or SQL NULL for a column declared ``none_as_null``.
    if not isinstance(column_type, JSON):
        return None
    if column_type.none_as_null:
        return _dumps_or_null
    return jsontext.dumps


def _dumps_or_null(value: Any) -> str | None:
    return None if value is None else jsontext.dumps(value)


class Statement:
    """A Core statement compiled once for asyncpg: its SQL and how to order (and
    encode) its named parameters. Literals in the statement (``status == 'PENDING'``)
    are bound once, here."""

    def __init__(self, stmt: ClauseElement) -> None:
        compiled = stmt.compile(dialect=_DIALECT)
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        self._params: list[tuple[str, Any, Any]] = []  # (name, encoder, literal)
        for name in compiled.positiontup or ():
            bind = compiled.binds[name]
            literal = _NAMED if bind.required else bind.effective_value
            self._params.append((name, _encoder(bind.type), literal))

    def args(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name, encode, literal in self._params:
            value = params[name] if literal is _NAMED else literal
            values.append(value if encode is None else encode(value))
        return values

    async def fetch(self, driver: Any, params: Mapping[str, Any]) -> list[Row]:
        rows: list[Row] = await driver.fetch(self.sql, *self.args(params))
        return rows

    async def executemany(self, driver: Any, params: Iterable[Mapping[str, Any]]) -> None:
        await driver.executemany(self.sql, [self.args(p) for p in params])

    async def fetchmany(self, driver: Any, params: Iterable[Mapping[str, Any]]) -> list[Row]:
        """``executemany`` that returns every execution's rows (RETURNING), in order."""
        rows: list[Row] = await driver.fetchmany(self.sql, [self.args(p) for p in params])
        return rows


class Rider(Protocol):
    """A write that rides in another statement as a data-modifying CTE
    (``WriteTx.defer``, ``store.events.SqlEvents.append``): its SQL over one array parameter per
    column, and those arrays."""

    @property
    def width(self) -> int: ...

    def unnest_sql(self, first: int, when: str = "") -> str:
        """Its SQL, parameters from ``$first`` on; ``when``: a condition every row
        also waits for (empty: none)."""
        ...

    def arrays(self, rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]: ...

    def exact_sql(self, first: int) -> str | None:
        """None, or the row count its CTE must return for the statement to go on."""
        ...

    def partial(self, rows: int) -> bool:
        """Could it write some of ``rows`` rows and not the others without raising?
        (A statement outside a transaction block cannot take that back.)"""
        ...

    async def executemany(self, driver: Any, rows: Iterable[Mapping[str, Any]]) -> None: ...


class Insert:
    """A multi-row INSERT of ``columns`` (default: all but an autoincrement key) as
    one asyncpg executemany: one prepared statement, pipelined."""

    def __init__(self, table: Table, columns: Sequence[str] | None = None) -> None:
        if columns is None:
            columns = [c.name for c in table.c if not (c.primary_key and c.autoincrement is True)]
        placeholders = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
        self.table = table.name
        self.sql = f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({placeholders})"
        self._columns = tuple((c, _encoder(table.c[c].type)) for c in columns)
        # For ``unnest_sql``: each column's array type, and how to read it back (JSON
        # travels as text, as the codec takes it, and is cast in the statement).
        self._arrays = tuple(
            ("text", f"r.{c}::jsonb")
            if isinstance(table.c[c].type, JSON)
            else (table.c[c].type.compile(dialect=_DIALECT), f"r.{c}")
            for c in columns
        )

    @property
    def width(self) -> int:
        """How many parameters ``unnest_sql`` takes."""
        return len(self._columns)

    def unnest_sql(self, first: int, when: str = "") -> str:
        """The same insert as one statement of any row count: one array parameter per
        column (``$first`` on, from ``arrays``), unnested in row order. Meant to ride in
        another statement (``store.events.SqlEvents.append``) instead of costing a round trip."""
        names = ", ".join(c for c, _ in self._columns)
        params = ", ".join(self.param(first, c) for c, _ in self._columns)
        return (
            f"INSERT INTO {self.table} ({names}) SELECT {', '.join(e for _, e in self._arrays)} "
            f"FROM unnest({params}) AS r({names})" + (f" WHERE {when}" if when else "")
        )

    def param(self, first: int, column: str) -> str:
        """``unnest_sql``'s array parameter of ``column``, typed as it declares it."""
        i = next(i for i, (c, _) in enumerate(self._columns) if c == column)
        return f"${first + i}::{self._arrays[i][0]}[]"

    def arrays(self, rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
        """``unnest_sql``'s parameters: one list per column."""
        return [[r[c] if enc is None else enc(r[c]) for r in rows] for c, enc in self._columns]

    def exact_sql(self, first: int) -> str | None:
        return None  # an insert goes on whatever it inserted (it raises on a conflict)

    def partial(self, rows: int) -> bool:
        return False  # every row, or a unique violation

    async def executemany(self, driver: Any, rows: Iterable[Mapping[str, Any]]) -> None:
        await driver.executemany(
            self.sql,
            [[r[c] if enc is None else enc(r[c]) for c, enc in self._columns] for r in rows],
        )


class FencedUpdate:
    """Many rows' UPDATE of ``columns`` as one statement over arrays (``unnest_sql``),
    each row matched by ``id`` and a fence on its token and an unexpired lease (parameters
    ``b_id``, ``b_token``, ``b_now``; values ``v_<column>``). As a rider
    (``WriteTx.defer``) it must change every row it is given (``exact_sql``), or the
    statement it rides in inserts nothing: its caller sees that and rolls back."""

    def __init__(
        self,
        table: Table,
        columns: Sequence[str],
        fence: str,
        *,
        fence_params: Sequence[tuple[str, str]] = (),
        kept: frozenset[str] = frozenset(),
    ) -> None:
        """``fence``: the condition a row's lease holds, over ``r.b_token``, ``r.b_now``
        and ``fence_params`` (more parameters: name, SQL type), and ``{ids}``, the array
        of every row's id; ``kept``: columns whose value, once set, the update keeps
        (COALESCE)."""
        self.table = table.name
        self._columns = (
            ("b_id", None, "text", "r.b_id"),
            ("b_token", None, "text", "r.b_token"),
            ("b_now", None, "timestamptz", "r.b_now"),
            *((name, None, sql_type, f"r.{name}") for name, sql_type in fence_params),
            *(
                (
                    f"v_{c}",
                    _encoder(table.c[c].type),
                    "text" if isinstance(table.c[c].type, JSON) else _array_of(table.c[c].type),
                    f"r.v_{c}::jsonb" if isinstance(table.c[c].type, JSON) else f"r.v_{c}",
                )
                for c in columns
            ),
        )
        values = self._columns[3 + len(fence_params) :]
        self._assign = ", ".join(
            f"{c} = COALESCE({self.table}.{c}, {e})" if c in kept else f"{c} = {e}"
            for (_, _, _, e), c in zip(values, columns, strict=True)
        )
        self._where = f"{self.table}.id = r.b_id AND {fence}"

    @property
    def width(self) -> int:
        return len(self._columns)

    def unnest_sql(self, first: int, when: str = "") -> str:
        names = ", ".join(name for name, _, _, _ in self._columns)
        params = ", ".join(f"${first + i}::{t}[]" for i, (_, _, t, _) in enumerate(self._columns))
        where = self._where.format(ids=f"${first}::text[]")
        return (
            f"UPDATE {self.table} SET {self._assign} FROM unnest({params}) AS r({names}) "
            f"WHERE {where}" + (f" AND {when}" if when else "")
        )

    def arrays(self, rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
        return [
            [r[c] if enc is None else enc(r[c]) for r in rows] for c, enc, _, _ in self._columns
        ]

    def exact_sql(self, first: int) -> str | None:
        return f"cardinality(${first}::text[])"

    def partial(self, rows: int) -> bool:
        return rows > 1  # each row is fenced on its own: some may move, others not

    async def executemany(self, driver: Any, rows: Iterable[Mapping[str, Any]]) -> None:
        raise RuntimeError("a fenced update rides in an events append, which checks its count")


def _array_of(column_type: Any) -> str:
    return str(column_type.compile(dialect=_DIALECT))

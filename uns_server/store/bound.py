"""The base of the SQL ports: a port is one slotted object holding its transaction's
connection (``Bound``; ``BoundTx`` also the write transaction, for writes that ride
in its events append), built per transaction by ``sql_store`` when a caller reaches
for it, so binding costs nothing next to a round trip. Each port's class lives in
its query module and holds its own statements."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from uns_server.store.db import WriteTx


class Bound:
    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn


class BoundTx(Bound):
    __slots__ = ("_tx",)

    def __init__(self, tx: WriteTx) -> None:
        self._conn = tx.conn
        self._tx = tx

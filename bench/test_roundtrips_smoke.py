"""bench.roundtrips at token size: a real PostgreSQL, real uns-servers under strace, and
the statements PostgreSQL logged per call (counts, no timings)."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench import roundtrips
from tests.toolchain.tools import skip_or_fail

APPEND_WITH_ROW = "WITH r0 AS (INSERT INTO uns_notifications"
SETTLE_IN_APPEND = "WITH r0 AS (UPDATE uns_notifications"
KEY_LOOKUP = "SELECT uns_notifications.id, uns_notifications.key"


def test_a_log_line_is_counted_by_its_peer() -> None:
    log = "\n".join(
        [
            '7 sendto(12<TCP:[127.0.0.1:40000->127.0.0.1:5432]>, ""..., 90, 0, NULL, 0) = 90',
            '7 recvfrom(12<TCP:[127.0.0.1:40000->127.0.0.1:5432]>, ""..., 99, 0, NULL, NULL) = 3',
            "8 sendmsg(20<TCP:[127.0.0.1:50051->127.0.0.1:41000]>, {msg_name=NULL}, 0) = 40",
            '7 sendto(13<TCP:[127.0.0.1:40002->127.0.0.1:6000]>, ""..., 9, 0, NULL, 0) = 9',
            "7 <... sendto resumed>) = 90",
        ]
    )
    assert roundtrips.parse(log, 5432) == {
        "sendto pg": 1,
        "recvfrom pg": 1,
        "sendmsg other": 1,
        "sendto other": 1,
    }


async def test_an_accept_and_a_settle_are_one_statement_each(tmp_path: Path) -> None:
    if shutil.which("strace") is None:
        skip_or_fail("strace not found: bench.roundtrips counts with it")
    rows = await roundtrips.run(5, None, tmp_path, statements=True)
    accept, delivered = rows
    assert (accept["row"], delivered["row"]) == ("accept", "accept+log")
    for row in rows:
        assert row["window"]["sendto pg"] >= 5, row  # type: ignore[index]
    logged = accept["statements_per_call"]
    assert _per_call(logged, APPEND_WITH_ROW) == 1.0, logged
    assert _per_call(logged, KEY_LOOKUP) == 0.0, logged  # no read before the write
    logged = delivered["statements_per_call"]
    assert _per_call(logged, SETTLE_IN_APPEND) == 1.0, logged
    assert "| accept+log |" in roundtrips.render(rows)


def _per_call(logged: object, prefix: str) -> float:
    assert isinstance(logged, dict)
    return float(sum(n for statement, n in logged.items() if statement.startswith(prefix)))

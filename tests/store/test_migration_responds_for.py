"""The migration that adds ``uns_api_keys.responds_for``: keys stored before it keep
working and answer only for their own principal (SPEC §3 tenancy), on both dialects."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

from tests.security.rpcs import OK, Callers
from tests.store.conftest import revision_before
from tests.support.server import send_request, start_server
from uns.v1 import key_service_pb2 as kpb
from uns.v1 import notification_service_pb2 as pb
from uns_server.services import auth
from uns_server.store import migrate
from uns_server.store.db import Database
from uns_server.store.tables import api_keys

LEGACY_SECRET = "uns_legacy_responder_of_alice"


async def test_keys_from_before_responds_for_answer_only_for_their_own_principal(
    empty_db_url: str, tmp_path: Path
) -> None:
    db = Database(empty_db_url)
    try:
        await migrate.upgrade(db, revision_before("responds_for"))
        async with db.write() as tx:
            await tx.conn.execute(
                api_keys.insert().values(  # only the columns the old schema has
                    id=str(uuid.uuid4()),
                    key_hash=auth.hash_key(LEGACY_SECRET),
                    prefix=LEGACY_SECRET[:10],
                    principal="alice",
                    roles=["responder"],
                    description="made before responds_for",
                    created_at=datetime.now(UTC),
                    revoked_at=None,
                )
            )
        await migrate.upgrade(db)
    finally:
        await db.dispose()

    server = await start_server(empty_db_url, tmp_path)
    try:
        callers = Callers(server)
        legacy = callers.raw(f"Bearer {LEGACY_SECRET}")
        ids = {}
        for who in ("alice", "bob"):
            sent = await callers(who).call("NotificationService/SendNotification", send_request())
            assert sent.reason == OK
            ids[who] = sent.response.notification_id
        for who, want in (("alice", OK), ("bob", "NOT_FOUND")):
            got = await legacy.call(
                "NotificationService/GetNotification",
                pb.GetNotificationRequest(notification_id=ids[who]),
            )
            assert got.reason == want, (who, got)
        listed = await callers("oscar").call("KeyService/ListApiKeys", kpb.ListApiKeysRequest())
        (key,) = [k for k in listed.response.api_keys if k.principal == "alice"]
        assert list(key.responds_for) == [] and list(key.roles) == [kpb.ROLE_RESPONDER]
    finally:
        await server.stop()

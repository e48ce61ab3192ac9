"""TLS and mutual TLS, with certificates generated for the test; under mTLS the
principal comes from the client certificate (mapped in the key file)."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from tests.support.certs import Issued, TestCA
from tests.support.grpc_errors import rich_error
from tests.support.server import KEYS, send_request, start_server, write_key_file
from uns.v1 import notification_service_pb2 as pb
from uns.v1 import notification_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


def secure_stub(
    target: str, ca: TestCA, client: Issued | None = None
) -> tuple[grpc.aio.Channel, pb_grpc.NotificationServiceStub]:
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca.cert.read_bytes(),
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None,
    )
    channel = grpc.aio.secure_channel(target, creds)
    return channel, pb_grpc.NotificationServiceStub(channel)


async def test_tls_serves_api_keys_and_refuses_plaintext(
    db_url: str, tmp_path: Path, ca: TestCA
) -> None:
    server_cert = ca.issue("server", "localhost", server=True)
    server = await start_server(
        db_url, tmp_path, tls_cert_file=str(server_cert.cert), tls_key_file=str(server_cert.key)
    )
    channel, stub = secure_stub(server.target, ca)
    try:
        sent = await stub.SendNotification(
            send_request(), metadata=(("authorization", f"Bearer {KEYS['alice']}"),)
        )
        assert sent.notification_id
        async with grpc.aio.insecure_channel(server.target) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as exc:
                await pb_grpc.NotificationServiceStub(plain).SendNotification(
                    send_request(),
                    metadata=(("authorization", f"Bearer {KEYS['alice']}"),),
                    timeout=5,
                )
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await channel.close()
        await server.stop()


async def test_mtls_principal_comes_from_the_client_certificate(
    db_url: str, tmp_path: Path, ca: TestCA
) -> None:
    server_cert = ca.issue("server", "localhost", server=True)
    orders = ca.issue("orders", "orders-svc", server=False)
    stranger = ca.issue("stranger", "unmapped-svc", server=False)
    keys = write_key_file(tmp_path)
    entries = json.loads(keys.read_text())
    entries.append({"certificate_cn": "orders-svc", "principal": "orders", "roles": ["producer"]})
    keys.write_text(json.dumps(entries))
    server = await start_server(
        db_url,
        tmp_path,
        api_keys_file=str(keys),
        tls_cert_file=str(server_cert.cert),
        tls_key_file=str(server_cert.key),
        tls_client_ca_file=str(ca.cert),
    )
    channels = []
    try:
        channel, stub = secure_stub(server.target, ca, orders)
        channels.append(channel)
        sent = await stub.SendNotification(send_request())  # no API key: the certificate
        got = await stub.GetNotification(
            pb.GetNotificationRequest(notification_id=sent.notification_id)
        )
        assert got.notification.principal == "orders"

        channel, stub = secure_stub(server.target, ca, stranger)
        channels.append(channel)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SendNotification(send_request())
        assert rich_error(exc.value).reason == "UNAUTHENTICATED"

        channel, stub = secure_stub(server.target, ca)  # no client certificate at all
        channels.append(channel)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SendNotification(
                send_request(),
                metadata=(("authorization", f"Bearer {KEYS['alice']}"),),
                timeout=5,
            )
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake fails
    finally:
        for channel in channels:
            await channel.close()
        await server.stop()

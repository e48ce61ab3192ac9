"""The Python gRPC ceiling: a bare ``grpc.aio`` server answering SendNotification at once.

Same method path and messages as uns-server (so the same request size and protobuf
work), but no authentication, validation or database. Run as a child process:
``python -m bench.baselines.echo_server PORT``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from typing import Any

import grpc

from uns.v1 import notification_service_pb2 as pb
from uns.v1 import types_pb2

SERVICE = "uns.v1.NotificationService"


async def send_notification(
    request: pb.SendNotificationRequest, context: grpc.aio.ServicerContext[Any, Any]
) -> pb.SendNotificationResponse:
    return pb.SendNotificationResponse(
        notification_id=str(uuid.uuid4()),
        state=types_pb2.NOTIFICATION_STATE_PENDING,
        delivery_mode=types_pb2.DELIVERY_MODE_GUARANTEED,
        resolved_channels=["log"],
    )


async def serve(port: int) -> None:
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        send_notification,
        request_deserializer=pb.SendNotificationRequest.FromString,
        response_serializer=pb.SendNotificationResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"SendNotification": handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"echo listening on 127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(grace=1)


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))

"""``uns-admin heartbeats`` over ``uns.v1.HeartbeatService`` (the remote mode): the
``cli.heartbeats.HeartbeatBackend`` the shared commands call."""

from __future__ import annotations

import grpc

from uns.v1 import heartbeat_service_pb2 as pb
from uns.v1 import heartbeat_service_pb2_grpc as pb_grpc
from uns_clients import ClientConfig
from uns_server.api.heartbeat_servicer import spec_to_wire
from uns_server.cli.heartbeats import PAGE_SIZE
from uns_server.cli.remote.connection import call
from uns_server.domain.heartbeats import Heartbeat


class RemoteHeartbeats:
    def __init__(self, channel: grpc.aio.Channel, config: ClientConfig) -> None:
        self._stub = pb_grpc.HeartbeatServiceStub(channel)
        self._config = config

    async def put(self, heartbeat: Heartbeat) -> pb.HeartbeatMonitor:
        request = pb.PutHeartbeatRequest(heartbeat=spec_to_wire(heartbeat))
        reply: pb.PutHeartbeatResponse = await call(self._config, self._stub.PutHeartbeat, request)
        return reply.heartbeat

    async def get(self, heartbeat_id: str) -> pb.HeartbeatMonitor:
        request = pb.GetHeartbeatRequest(heartbeat_id=heartbeat_id)
        reply: pb.GetHeartbeatResponse = await call(self._config, self._stub.GetHeartbeat, request)
        return reply.heartbeat

    async def list_all(self) -> list[pb.HeartbeatMonitor]:
        out: list[pb.HeartbeatMonitor] = []
        token = ""
        while True:
            request = pb.ListHeartbeatsRequest(page_size=PAGE_SIZE, page_token=token)
            reply = await call(self._config, self._stub.ListHeartbeats, request)
            out += list(reply.heartbeats)
            token = reply.next_page_token
            if not token:
                return out

    async def delete(self, heartbeat_id: str) -> pb.HeartbeatMonitor:
        request = pb.DeleteHeartbeatRequest(heartbeat_id=heartbeat_id)
        reply = await call(self._config, self._stub.DeleteHeartbeat, request)
        gone: pb.HeartbeatMonitor = reply.heartbeat
        return gone

"""``POST /heartbeats/{heartbeat_id}``: a beat from ``curl`` in a cron job (SPEC §7
"Alerts in")::

    curl -fsS -X POST -H "Authorization: Bearer $UNS_KEY" https://uns.example/heartbeats/nightly-backup

No body and no Content-Type are needed (anything sent is ignored). Like Alertmanager's
route (``http.alertmanager``), the work is the gRPC method itself, ``HeartbeatService.Beat``
over the bridge's loopback channel with the key forwarded: authentication, the role,
request budgets and validation are the gRPC path's. The answer is the ``BeatResponse``
as JSON (200), or the Connect error (401 without a valid key, 403 for a key that may
not beat, 404 for an unknown heartbeat).
"""

from __future__ import annotations

import json

from aiohttp import web

from uns.v1 import heartbeat_service_pb2 as pb
from uns_server.http.connect import JSON, Bridge
from uns_server.http.connect_wire import Refusal, message_json

PATH = "/heartbeats/{heartbeat_id}"
_BEAT = "/uns.v1.HeartbeatService/Beat"


def routes(bridge: Bridge) -> list[web.RouteDef]:
    async def beat(request: web.Request) -> web.StreamResponse:
        try:
            await bridge.body(request)  # read (and bounded), never used
            message = pb.BeatRequest(heartbeat_id=request.match_info["heartbeat_id"])
            answer = pb.BeatResponse.FromString(await bridge.invoke(_BEAT, message, request))
        except Refusal as refusal:
            return refusal.response()
        return web.Response(text=json.dumps(message_json(answer)), content_type=JSON)

    return [web.post(PATH, beat)]

"""Server reflection, under both of its names.

grpcio-reflection serves ``grpc.reflection.v1alpha.ServerReflection``; current clients
(grpcurl, grpcui, Postman) ask for ``grpc.reflection.v1.ServerReflection`` first, and a
client that only speaks v1 finds nothing. The two protocols are the same messages under
another package name, so one servicer answers both. Only v1alpha is listed among the
services: the v1 descriptors are not in this process's pool, so a listed v1 could not
be described.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"


def add_reflection(service_names: Sequence[str], registrar: Any) -> None:
    """Reflection on ``service_names`` (plus itself), through ``registrar`` (a
    ``grpc.aio.Server`` or one that stands in for it)."""
    servicer = reflection.aio.ReflectionServicer([*service_names, reflection.SERVICE_NAME])
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, registrar)
    registrar.add_registered_method_handlers(
        V1_SERVICE_NAME,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )

"""Server reflection, under both of its names, resolving every kind of symbol.

grpcio-reflection serves ``grpc.reflection.v1alpha.ServerReflection``; current clients
(grpcurl, grpcui, Postman) ask for ``grpc.reflection.v1.ServerReflection`` first, and a
client that only speaks v1 finds nothing. The two protocols are the same messages under
another package name, so one servicer answers both. Only v1alpha is listed among the
services: the v1 descriptors are not in this process's pool, so a listed v1 could not
be described.

Method symbols: grpcio-reflection answers ``file_containing_symbol`` with the pool's
``FindFileContainingSymbol``, and the upb implementation of protobuf (the default one)
resolves packages, messages, fields, enums, enum values and services there, but not a
service's methods (the pure-Python pool does). grpcurl (``describe
pkg.Service.Method``) and ghz ask for exactly that symbol, so they failed with "Symbol
not found". :class:`MethodResolvingPool` adds that one lookup in front of the same pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"


class MethodResolvingPool:
    """A descriptor pool whose ``FindFileContainingSymbol`` also finds
    ``package.Service.Method``; everything else is the wrapped pool's."""

    def __init__(self, pool: descriptor_pool.DescriptorPool | None = None) -> None:
        self._pool = pool if pool is not None else descriptor_pool.Default()

    def FindFileContainingSymbol(self, symbol: str) -> FileDescriptor:
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            try:
                method = self._pool.FindMethodByName(symbol)
            except KeyError:
                pass
            else:
                file: FileDescriptor = method.containing_service.file
                return file
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def add_reflection(service_names: Sequence[str], registrar: Any) -> None:
    """Reflection on ``service_names`` (plus itself), through ``registrar`` (a
    ``grpc.aio.Server`` or one that stands in for it)."""
    servicer = reflection.aio.ReflectionServicer(
        [*service_names, reflection.SERVICE_NAME], pool=MethodResolvingPool()
    )
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

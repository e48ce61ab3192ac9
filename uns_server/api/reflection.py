"""Server reflection, under both of its names, resolving every kind of symbol.

grpcio-reflection serves ``grpc.reflection.v1alpha.ServerReflection``; current clients
(grpcurl, grpcui, Postman) ask for ``grpc.reflection.v1.ServerReflection`` first, and a
client that only speaks v1 finds nothing. The two protocols are the same messages under
another package name, so one servicer answers both. grpcio-reflection ships only the
v1alpha descriptors; :func:`register_v1_descriptor` derives v1's ``reflection.proto``
from them and adds it to the pool, so both names are listed and can be described, as
on a Go or Java server.

Method symbols: grpcio-reflection answers ``file_containing_symbol`` with the pool's
``FindFileContainingSymbol``, and the upb implementation of protobuf (the default one)
resolves packages, messages, fields, enums, enum values and services there, but not a
service's methods (the pure-Python pool does). grpcurl (``describe
pkg.Service.Method``) and ghz ask for exactly that symbol, so they failed with "Symbol
not found". :class:`MethodResolvingPool` adds that one lookup in front of the same pool.

Documentation: the generated modules' descriptors carry no source info, so reflection
served no comments and ``grpcurl describe`` showed none. scripts/generate.sh commits the
descriptor set with source info (``uns_v1.binpb``); :class:`DocumentedReflection` answers
with those files in place of the pool's copies of the same files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc

V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"  # its name upstream
DESCRIPTOR_SET = Path(__file__).with_name("uns_v1.binpb")


def documented_files(path: Path = DESCRIPTOR_SET) -> dict[str, bytes]:
    """Each file of the committed descriptor set (source info included), by name."""
    files = descriptor_pb2.FileDescriptorSet.FromString(path.read_bytes()).file
    return {f.name: f.SerializeToString() for f in files}


class DocumentedReflection(reflection.aio.ReflectionServicer):  # type: ignore[misc]
    """grpcio-reflection's servicer, answering file descriptors with source info."""

    def __init__(self, service_names: Sequence[str], pool: Any, files: dict[str, bytes]) -> None:
        super().__init__(service_names, pool=pool)
        self._documented = files

    def _documented_response(self, response: Any) -> Any:
        if response.HasField("file_descriptor_response"):
            protos = response.file_descriptor_response.file_descriptor_proto
            for i, serialized in enumerate(protos):
                name = descriptor_pb2.FileDescriptorProto.FromString(serialized).name
                if name in self._documented:
                    protos[i] = self._documented[name]
        return response

    def _file_by_filename(self, request: Any, filename: str) -> Any:
        return self._documented_response(super()._file_by_filename(request, filename))

    def _file_containing_symbol(self, request: Any, name: str) -> Any:
        return self._documented_response(super()._file_containing_symbol(request, name))

    def _file_containing_extension(self, request: Any, containing: str, number: int) -> Any:
        return self._documented_response(
            super()._file_containing_extension(request, containing, number)
        )


def _renamed(type_name: str, old: str, new: str) -> str:
    prefix = f".{old}."
    return f".{new}.{type_name[len(prefix) :]}" if type_name.startswith(prefix) else type_name


def _rename_types(messages: Any, old: str, new: str) -> None:
    for message in messages:
        for field in message.field:
            if field.HasField("type_name"):  # scalars must not get an empty one
                field.type_name = _renamed(field.type_name, old, new)
        _rename_types(message.nested_type, old, new)


def register_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Adds ``grpc/reflection/v1/reflection.proto`` to ``pool`` (once): v1alpha's file
    under the v1 package, which is all v1 changed."""
    try:
        pool.FindFileByName(V1_FILE_NAME)
        return
    except KeyError:
        pass
    v1 = descriptor_pb2.FileDescriptorProto.FromString(reflection_pb2.DESCRIPTOR.serialized_pb)
    old = v1.package
    v1.name, v1.package = V1_FILE_NAME, V1_PACKAGE
    v1.options.Clear()  # v1alpha's are deprecated=true and its Java/Go packages
    v1.options.java_package = "io.grpc.reflection.v1"
    v1.options.java_outer_classname = "ServerReflectionProto"
    v1.options.java_multiple_files = True
    v1.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    _rename_types(v1.message_type, old, V1_PACKAGE)
    for service in v1.service:
        for method in service.method:
            method.input_type = _renamed(method.input_type, old, V1_PACKAGE)
            method.output_type = _renamed(method.output_type, old, V1_PACKAGE)
    pool.AddSerializedFile(v1.SerializeToString())


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
    register_v1_descriptor(descriptor_pool.Default())
    servicer = DocumentedReflection(
        [*service_names, reflection.SERVICE_NAME, V1_SERVICE_NAME],
        MethodResolvingPool(),
        documented_files(),
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

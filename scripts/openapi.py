#!/usr/bin/env python3
"""Writes the OpenAPI 3.1 document of UNS's JSON over HTTP (the Connect protocol's unary
JSON shape) from a descriptor set with source info (``buf build -o``), to stdout.

Run by scripts/generate.sh; the output is committed as uns_server/http/openapi.json and
served at /openapi.json. Every unary method of every ``uns.v1`` service becomes
``POST /uns.v1.Service/Method``; a server-streaming one (WatchEvents) becomes ``GET``
with its request's fields as query parameters, ``Last-Event-ID`` and a
``text/event-stream`` answer (uns_server/http/connect.py). Proto comments become
descriptions. JSON field names, enum names, 64-bit integers as strings, bytes as base64
and the well-known types follow protobuf's JSON mapping (what ``google.protobuf.
json_format`` writes; it also reads numbers for 64-bit fields and enums, which the
document does not promise). Required fields and request examples come from
scripts/openapi_rules.py; every example is parsed against the descriptors here, so one
that names a wrong field fails generation. The routes that are not gRPC methods
(/integrations/alertmanager) come from scripts/openapi_integrations.py. Deterministic:
the same descriptors give the same bytes.

Usage: scripts/openapi.py DESCRIPTOR_SET > openapi.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import openapi_integrations
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from openapi_rules import EXAMPLES, REQUIRED

PACKAGE = "uns.v1"
Path_ = tuple[int, ...]  # a source-info path
F = descriptor_pb2.FieldDescriptorProto
INT32 = {F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32, F.TYPE_UINT32, F.TYPE_FIXED32}
UNSIGNED32 = {F.TYPE_UINT32, F.TYPE_FIXED32}
INT64 = {F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64, F.TYPE_UINT64, F.TYPE_FIXED64}
UNSIGNED64 = {F.TYPE_UINT64, F.TYPE_FIXED64}
WELL_KNOWN: dict[str, dict[str, Any]] = {
    "google.protobuf.Timestamp": {"type": "string", "format": "date-time"},
    "google.protobuf.Duration": {
        "type": "string",
        "pattern": r"^-?[0-9]+(\.[0-9]{1,9})?s$",
        "description": 'Seconds with an "s" suffix, e.g. "600s" or "1.5s".',
    },
    "google.protobuf.Struct": {"type": "object"},
    "google.protobuf.Value": {},
    "google.protobuf.ListValue": {"type": "array"},
    "google.protobuf.Any": {
        "type": "object",
        "properties": {"@type": {"type": "string"}},
        "required": ["@type"],
    },
}
CONNECT_CODES = [
    "canceled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
    "already_exists", "permission_denied", "resource_exhausted", "failed_precondition",
    "aborted", "out_of_range", "unimplemented", "internal", "unavailable", "data_loss",
    "unauthenticated",
]  # fmt: skip
ERROR_SCHEMA = {
    "type": "object",
    "description": (
        "A google.rpc.Status in the Connect protocol's error JSON: code (the gRPC code's "
        "name in snake_case), message, and details, each a google.protobuf.Any as "
        "type (its full name), value (its bytes, base64) and debug (the same message as "
        "JSON). Every refusal carries one google.rpc.ErrorInfo (domain uns.v1, reason, "
        "metadata); invalid input adds a google.rpc.BadRequest, RATE_LIMITED a "
        "google.rpc.RetryInfo."
    ),
    "properties": {
        "code": {"type": "string", "enum": CONNECT_CODES},
        "message": {"type": "string"},
        "details": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    "value": {"type": "string"},
                    "debug": {"type": "object"},
                },
                "required": ["type", "value"],
            },
        },
    },
    "required": ["code"],
}


class Comments:
    """The leading comments of a file's elements, by their source-info path."""

    def __init__(self, file: descriptor_pb2.FileDescriptorProto) -> None:
        self._by_path = {
            tuple(loc.path): loc.leading_comments for loc in file.source_code_info.location
        }

    def get(self, *path: int) -> str | None:
        text = self._by_path.get(path, "")
        lines = [line.strip() for line in text.strip().splitlines()]
        paragraph = " ".join(line for line in lines if line)
        return paragraph or None


def _described(schema: dict[str, Any], description: str | None) -> dict[str, Any]:
    if description:
        if "$ref" in schema:  # 3.1 allows siblings of $ref
            return {"$ref": schema["$ref"], "description": description}
        return {**schema, "description": description}
    return schema


class Builder:
    def __init__(self, files: list[descriptor_pb2.FileDescriptorProto]) -> None:
        self.schemas: dict[str, Any] = {}
        self.messages: dict[
            str, tuple[descriptor_pb2.DescriptorProto, Comments, tuple[int, ...]]
        ] = {}
        self.enums: dict[
            str, tuple[descriptor_pb2.EnumDescriptorProto, Comments, tuple[int, ...]]
        ] = {}
        self._pool = descriptor_pool.DescriptorPool()
        for file in files:
            self._pool.Add(file)
            comments = Comments(file)
            for i, message in enumerate(file.message_type):
                self._index_message(f"{file.package}.{message.name}", message, comments, (4, i))
            for i, enum in enumerate(file.enum_type):
                self.enums[f"{file.package}.{enum.name}"] = (enum, comments, (5, i))

    def _index_message(
        self, name: str, message: descriptor_pb2.DescriptorProto, comments: Comments,
        path: tuple[int, ...],
    ) -> None:  # fmt: skip
        self.messages[name] = (message, comments, path)
        for i, nested in enumerate(message.nested_type):
            self._index_message(f"{name}.{nested.name}", nested, comments, (*path, 3, i))
        for i, enum in enumerate(message.enum_type):
            self.enums[f"{name}.{enum.name}"] = (enum, comments, (*path, 4, i))

    def message_class(self, full_name: str) -> Any:
        return message_factory.GetMessageClass(self._pool.FindMessageTypeByName(full_name))

    def ref(self, full_name: str) -> dict[str, Any]:
        if full_name in WELL_KNOWN:
            return dict(WELL_KNOWN[full_name])
        if full_name not in self.schemas:
            self.schemas[full_name] = {}  # recursion guard, filled below
            if full_name in self.enums:
                self.schemas[full_name] = self._enum(full_name)
            else:
                self.schemas[full_name] = self._message(full_name)
        return {"$ref": f"#/components/schemas/{full_name}"}

    def _enum(self, full_name: str) -> dict[str, Any]:
        enum, comments, path = self.enums[full_name]
        values = [v.name for v in enum.value]
        lines = [comments.get(*path) or ""]
        for i, value in enumerate(enum.value):
            text = comments.get(*path, 2, i)
            if text:
                lines.append(f"{value.name}: {text}")
        return _described({"type": "string", "enum": values}, "\n\n".join(x for x in lines if x))

    def _message(self, full_name: str) -> dict[str, Any]:
        message, comments, path = self.messages[full_name]
        rules = REQUIRED.get(full_name, {})
        names = {field.name for field in message.field}
        unknown = sorted(set(rules) - names)
        if unknown:
            raise SystemExit(f"openapi: REQUIRED names no field {unknown} of {full_name}")
        properties: dict[str, Any] = {}
        required = []
        for i, field in enumerate(message.field):
            schema = self.field_schema(full_name, message, field)
            if field.name in rules:
                required.append(field.json_name)
                schema = self._present(schema, field)
            properties[field.json_name] = _described(schema, comments.get(*path, 2, i))
        result: dict[str, Any] = {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
        }
        if required:
            result["required"] = required
        return _described(result, comments.get(*path))

    def _present(self, schema: dict[str, Any], field: F) -> dict[str, Any]:
        """A required field's schema without the values the server takes as missing: an
        empty or blank string, an empty list, a zero number, an enum's zero value."""
        if field.label == F.LABEL_REPEATED:
            return {**schema, "minItems": 1}
        if field.type == F.TYPE_STRING:
            return {**schema, "minLength": 1, "pattern": r"\S"}
        if field.type in INT32 | INT64:  # "between 1 and N": zero is absent in proto3
            return {**schema, "not": {"enum": [0, "0"]}}
        if field.type == F.TYPE_ENUM:
            enum, _, _ = self.enums[field.type_name.lstrip(".")]
            zero = next((v.name for v in enum.value if v.number == 0), None)
            if zero is not None:
                return {**schema, "not": {"const": zero}}
        return schema

    def field_schema(
        self, owner: str, message: descriptor_pb2.DescriptorProto, field: F
    ) -> dict[str, Any]:
        if field.type == F.TYPE_MESSAGE:
            entry = self._map_entry(owner, message, field)
            if entry is not None:
                return {"type": "object", "additionalProperties": self._scalar(entry.field[1])}
        item = self._scalar(field)
        if field.label == F.LABEL_REPEATED:
            return {"type": "array", "items": item}
        return item

    def _map_entry(
        self, owner: str, message: descriptor_pb2.DescriptorProto, field: F
    ) -> descriptor_pb2.DescriptorProto | None:
        for nested in message.nested_type:
            if nested.options.map_entry and field.type_name == f".{owner}.{nested.name}":
                return nested
        return None

    def _scalar(self, field: F) -> dict[str, Any]:
        if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
            return self.ref(field.type_name.lstrip("."))
        if field.type == F.TYPE_STRING:
            return {"type": "string"}
        if field.type == F.TYPE_BYTES:
            return {"type": "string", "format": "byte", "contentEncoding": "base64"}
        if field.type == F.TYPE_BOOL:
            return {"type": "boolean"}
        if field.type in UNSIGNED32:
            return {"type": "integer", "format": "int32", "minimum": 0, "maximum": 2**32 - 1}
        if field.type in INT32:
            return {"type": "integer", "format": "int32"}
        if field.type in UNSIGNED64:  # a decimal JSON string, as json_format writes it
            return {"type": "string", "format": "int64", "pattern": "^[0-9]{1,20}$"}
        if field.type in INT64:
            return {"type": "string", "format": "int64", "pattern": "^-?[0-9]{1,19}$"}
        if field.type == F.TYPE_FLOAT:
            return {"type": "number", "format": "float"}
        return {"type": "number", "format": "double"}


ERROR_RESPONSE = {
    "description": "A refusal (google.rpc.Status)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/connect.error"}}},
}
SSE_DESCRIPTION = (
    "Server-Sent Events (text/event-stream), one frame per stream message: `event: event` "
    "with `id:` the event's sequence and `data:` the WatchEventsResponse as JSON "
    '(`{"event": {...}}`); `event: heartbeat` with `id:` the high-water sequence and '
    '`data:` `{"heartbeat": {...}}`; a refusal after the stream started is a last '
    "`event: error` whose `data:` is the google.rpc.Status JSON. A reconnecting "
    "EventSource sends the last `id:` as Last-Event-ID and resumes after it."
)


def _unary(
    builder: Builder, service: str, method: descriptor_pb2.MethodDescriptorProto
) -> dict[str, Any]:
    body: dict[str, Any] = {"schema": builder.ref(method.input_type.lstrip("."))}
    examples = EXAMPLES.get(f"{PACKAGE}.{service}/{method.name}")
    if examples:
        request = builder.message_class(method.input_type.lstrip("."))
        for value in examples.values():  # a wrong field name fails generation
            json_format.ParseDict(value, request(), ignore_unknown_fields=False)
        body["examples"] = {name: {"value": value} for name, value in examples.items()}
    return {
        "post": {
            "requestBody": {"required": True, "content": {"application/json": body}},
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {
                        "application/json": {"schema": builder.ref(method.output_type.lstrip("."))}
                    },
                },
                "default": ERROR_RESPONSE,
            },
        }
    }


def _server_streaming(
    builder: Builder, method: descriptor_pb2.MethodDescriptorProto
) -> dict[str, Any]:
    """GET with the request's fields as query parameters (uns_server/http/connect_wire.py
    parse_query: proto or JSON names, a repeated field repeated), as connect.py serves it."""
    request_name = method.input_type.lstrip(".")
    builder.ref(request_name)
    request, comments, path = builder.messages[request_name]
    parameters: list[dict[str, Any]] = []
    for i, field in enumerate(request.field):
        schema = builder.field_schema(request_name, request, field)
        parameter: dict[str, Any] = {"name": field.json_name, "in": "query", "schema": schema}
        if field.label == F.LABEL_REPEATED:
            parameter.update(style="form", explode=True)
        parameters.append(_described(parameter, comments.get(*path, 2, i)))
    parameters.append(
        {
            "name": "Last-Event-ID",
            "in": "header",
            "description": (
                "The last `id:` received: resumes after that sequence (it is the "
                "request's afterSequence, and wins over the query parameter)."
            ),
            "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
        }
    )
    data = builder.ref(method.output_type.lstrip("."))
    return {
        "get": {
            "parameters": parameters,
            "responses": {
                "200": {
                    "description": SSE_DESCRIPTION,
                    "content": {
                        "text/event-stream": {
                            "schema": {"type": "string"},
                            # The JSON in each frame's data: line (OpenAPI 3.2's itemSchema).
                            "x-event-data": data,
                        }
                    },
                },
                "204": {"description": "The stream ended before its first message."},
                "default": ERROR_RESPONSE,
            },
        }
    }


def document(files: list[descriptor_pb2.FileDescriptorProto]) -> dict[str, Any]:
    builder = Builder(files)
    paths: dict[str, Any] = {}
    tags = []
    for file in files:
        if file.package != PACKAGE:
            continue
        comments = Comments(file)
        for s, service in enumerate(file.service):
            service_name = f"{file.package}.{service.name}"
            tags.append(_described({"name": service_name}, comments.get(6, s)))
            for m, method in enumerate(service.method):
                if method.client_streaming:
                    continue  # none: HTTP/1.1 JSON has no client streams
                if method.server_streaming:
                    item = _server_streaming(builder, method)
                else:
                    item = _unary(builder, service.name, method)
                for operation in item.values():
                    operation.update(
                        operationId=f"{service.name}_{method.name}",
                        tags=[service_name],
                        summary=f"{service.name}.{method.name}",
                    )
                    description = comments.get(6, s, 2, m)
                    if description:
                        operation["description"] = description
                paths[f"/{service_name}/{method.name}"] = item
    schemas = dict(sorted(builder.schemas.items()))
    schemas["connect.error"] = ERROR_SCHEMA
    # Routes that are not gRPC methods (scripts/openapi_integrations.py).
    paths.update(openapi_integrations.PATHS)
    schemas.update(openapi_integrations.SCHEMAS)
    tags.append(openapi_integrations.TAG)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "UNS JSON over HTTP",
            "version": PACKAGE,
            "description": (
                "Every unary RPC of the uns.v1 services, in the Connect protocol's unary "
                "JSON shape: POST /uns.v1.Service/Method with Content-Type "
                "application/json and the same authorization: Bearer key as gRPC. "
                "WatchEvents is GET /uns.v1.NotificationService/WatchEvents with Accept: "
                "text/event-stream (Server-Sent Events, resumable with Last-Event-ID)."
            ),
        },
        "security": [{"bearer": []}],
        "tags": tags,
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
    }


def main() -> None:
    data = Path(sys.argv[1]).read_bytes()
    files = list(descriptor_pb2.FileDescriptorSet.FromString(data).file)
    json.dump(document(files), sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

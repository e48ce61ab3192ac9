"""protoc plugin that emits gRPC Python stubs (``*_pb2_grpc.py``).

The gRPC Python generator ships only inside grpcio-tools' bundled protoc (as
``--grpc_python_out``), not as a ``protoc-gen-*`` executable, and buf cannot
use it as a ``protoc_builtin`` (buf only knows protoc's own generators). This
plugin bridges the two: it reads the CodeGeneratorRequest that buf sends on
stdin, hands the already-parsed descriptors to grpc_tools.protoc through
``--descriptor_set_in`` and returns the generated files in a
CodeGeneratorResponse. Parameters (``opt:`` in buf.gen.yaml) are passed through.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc  # type: ignore[import-untyped]


def generate(request: plugin_pb2.CodeGeneratorRequest) -> plugin_pb2.CodeGeneratorResponse:
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    with tempfile.TemporaryDirectory(prefix="protoc-gen-grpc_python.") as tmp:
        work = pathlib.Path(tmp)
        descriptors = work / "descriptors.binpb"
        descriptors.write_bytes(
            descriptor_pb2.FileDescriptorSet(file=request.proto_file).SerializeToString()
        )
        out = work / "out"
        out.mkdir()
        param = f"{request.parameter}:" if request.parameter else ""
        argv = [
            "grpc_tools.protoc",
            f"--descriptor_set_in={descriptors}",
            f"--grpc_python_out={param}{out}",
            *request.file_to_generate,
        ]
        if protoc.main(argv) != 0:
            response.error = "grpc_tools.protoc --grpc_python_out failed (see stderr)"
            return response
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            response.file.add(
                name=path.relative_to(out).as_posix(),
                content=path.read_text(encoding="utf-8"),
            )
    return response


def main() -> int:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    sys.stdout.buffer.write(generate(request).SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())

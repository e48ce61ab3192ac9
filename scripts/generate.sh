#!/usr/bin/env bash
# Regenerates every client stub from protos/ (the one command to run after a
# .proto change; CI checks the result with scripts/check-generated.sh).
#
#   clients/python/uns/     Python package `uns.v1` (*_pb2.py, *_pb2_grpc.py, .pyi)
#   clients/go/gen/         Go package unsv1 of module github.com/uns-io/uns/clients/go
#   clients/rust/src/gen/   Rust sources included by clients/rust/src/lib.rs
#   uns_server/api/uns_v1.binpb   the descriptor set with source info (comments),
#                                 served by reflection (grpcurl describe shows them)
#   uns_server/http/openapi.json  OpenAPI 3.1 of the Connect JSON routes (scripts/openapi.py)
#
# Installs the pinned plugins first when needed (scripts/install-tools.sh), then
# deletes the old outputs so that removed protos leave nothing behind. The
# output is byte-identical from run to run.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TOOLS_BIN="${UNS_TOOLS_DIR:-$HOME/.cache/uns-tools}/bin"
# One interpreter for install-tools, scripts/protoc and the grpc_python plugin.
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHON
"$ROOT/scripts/install-tools.sh" --quiet
export PATH="$TOOLS_BIN:$PATH"

# Every plugin in buf.gen.yaml must be present: install-tools only warns about
# a missing go or cargo, but half-generated clients are worse than an error.
missing=()
for tool in buf protoc-gen-mypy protoc-gen-mypy_grpc protoc-gen-go protoc-gen-go-grpc protoc-gen-prost protoc-gen-tonic; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
  echo "generate: ERROR: missing ${missing[*]}; install go and cargo, then run scripts/install-tools.sh" >&2
  exit 1
fi

GENERATED_DIRS=(clients/python/uns clients/go/gen clients/rust/src/gen)
DESCRIPTOR_SET=uns_server/api/uns_v1.binpb
OPENAPI=uns_server/http/openapi.json
rm -rf "${GENERATED_DIRS[@]}" "$DESCRIPTOR_SET" "$OPENAPI"

buf generate
# With imports and source info (buf build's default): the comments reach reflection.
buf build protos -o "$DESCRIPTOR_SET"
"$PYTHON" scripts/openapi.py "$DESCRIPTOR_SET" >"$OPENAPI"

# Python: make `uns` and `uns.v1` regular, typed packages.
for dir in clients/python/uns clients/python/uns/v1; do
  printf '"""Generated from protos/ by scripts/generate.sh. DO NOT EDIT."""\n' >"$dir/__init__.py"
done
: >clients/python/uns/py.typed

# protoc-gen-go output is gofmt-clean already; this keeps it so if that changes.
if command -v gofmt >/dev/null 2>&1; then
  gofmt -w clients/go/gen
fi

echo "generate: regenerated ${GENERATED_DIRS[*]} $DESCRIPTOR_SET $OPENAPI"

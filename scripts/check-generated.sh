#!/usr/bin/env bash
# CI gate: regenerates all stubs and fails when the committed ones differ
# (modified, deleted or untracked files under the generated directories).
# Fix a failure by running scripts/generate.sh and committing the result.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

GENERATED_DIRS=(clients/python/uns clients/go/gen clients/rust/src/gen uns_server/api/uns_v1.binpb uns_server/http/openapi.json)

"$ROOT/scripts/generate.sh"

changes="$(git status --porcelain --untracked-files=all -- "${GENERATED_DIRS[@]}")"
if [[ -n "$changes" ]]; then
  echo "check-generated: FAIL: generated code is out of date with protos/ or buf.gen.yaml." >&2
  echo "check-generated: run scripts/generate.sh and commit the result." >&2
  git status --short --untracked-files=all -- "${GENERATED_DIRS[@]}" >&2
  git --no-pager diff --stat -- "${GENERATED_DIRS[@]}" >&2
  git --no-pager diff -- "${GENERATED_DIRS[@]}" | head -n 200 >&2
  exit 1
fi
echo "check-generated: OK: generated code matches protos/"

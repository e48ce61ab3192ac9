#!/usr/bin/env bash
# The wire contract cannot break silently: buf lint, buf format, and buf breaking
# against the previous commit (override with UNS_BREAKING_AGAINST=<git ref>).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${UNS_TOOLS_DIR:-$HOME/.cache/uns-tools}/bin:$PATH"
buf lint
buf format --diff --exit-code
against="${UNS_BREAKING_AGAINST:-HEAD~1}"
if ! git rev-parse --verify --quiet "$against^{commit}" >/dev/null; then
  echo "check-contract: no $against in this clone; skipping buf breaking" >&2
  exit 0
fi
if [[ -z "$(git ls-tree -r --name-only "$against" -- protos)" ]]; then
  echo "check-contract: $against has no protos/; nothing to compare" >&2
  exit 0
fi
# The uns.v1 module only (protos_vendor holds vendored googleapis files).
buf breaking protos --against ".git#ref=$(git rev-parse "$against"),subdir=protos"
echo "check-contract: lint, format and breaking (against $against) are clean"

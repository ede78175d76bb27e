#!/usr/bin/env bash
# Regenerate kubernetes-1.30.schema.json from the npm packages kubernetes-types and
# ts-json-schema-generator (exact versions below). Needs the npm registry; not run in CI, which
# validates against the committed file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
(cd "$tools" && npm init -y >/dev/null &&
  npm install --no-audit --no-fund --loglevel=error kubernetes-types@1.30.0 ts-json-schema-generator@2.4.0 >/dev/null)
node "$here/generate-kubernetes-schema.mjs" "$tools" "$here/kubernetes-1.30.schema.json"
(cd "$here/../.." && npx biome format --write deploy/schemas/kubernetes-1.30.schema.json >/dev/null)

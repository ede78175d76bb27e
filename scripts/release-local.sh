#!/usr/bin/env bash
# Publish every public Galley package to a throwaway local npm registry (Verdaccio, from npm) and
# keep serving it until interrupted, so that unreleased builds install as users install releases:
#
#   npm run release:local                 # builds first
#   npm run release:local -- --no-build   # publishes what is already built
#
# The registry listens on a free port of 127.0.0.1 and stores into a temporary folder that is
# removed at exit. @galley/* come only from it; every other package is fetched from the npm
# registry this npm uses (an uplink). Once every package is published it prints, on one line:
#
#   Galley registry: http://127.0.0.1:<port>/
#
# and an application installs with `npm install --registry http://127.0.0.1:<port>/ @galley/client`
# (docs/guides/using-galley.md). Ctrl-C or SIGTERM stops the registry.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
verdaccio_version=6.8.0
# The published packages; every other workspace is private.
packages=(proto packages/config packages/backends-native packages/client packages/server)

build=true
for arg in "$@"; do
  case $arg in
  --no-build) build=false ;;
  *) echo "usage: release-local.sh [--no-build]" >&2 && exit 2 ;;
  esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/galley-registry.XXXXXX")
registry_pid=
cleanup() {
  # Verdaccio runs in a session of its own (setsid): npx and its node child stop together.
  if [ -n "$registry_pid" ]; then
    kill -TERM -- "-$registry_pid" 2>/dev/null || true
    wait "$registry_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if $build; then
  # From empty dist folders: tsc never deletes the output of a source file that is gone.
  for pkg in "${packages[@]}"; do rm -rf "$pkg/dist"; done
  echo "release-local: npm run build"
  npm run build --silent
fi
for pkg in "${packages[@]}"; do
  [ -d "$pkg/dist" ] || { echo "release-local: $pkg/dist is missing: run 'npm run build'" >&2 && exit 1; }
done

# A free port, chosen by the OS; Verdaccio cannot listen on port 0 itself.
port=$(node -e 'const s = require("node:net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')
url="http://127.0.0.1:$port/"
upstream=$(npm config get registry)
cat >"$work/config.yaml" <<EOF
storage: $work/storage
auth:
  htpasswd:
    file: $work/htpasswd
    max_users: 1
uplinks:
  npmjs:
    url: $upstream
packages:
  "@galley/*":
    access: \$all
    publish: \$authenticated
  "**":
    access: \$all
    publish: \$authenticated
    proxy: npmjs
server:
  keepAliveTimeout: 60
log: { type: stdout, format: pretty, level: warn }
EOF

echo "release-local: starting Verdaccio $verdaccio_version on $url (storage $work/storage)"
# Run from the temporary folder (this repository's .npmrc must not apply to npx's own install), in a
# session of its own so that cleanup stops npx and the node process it starts, both.
(cd "$work" && exec setsid npx --yes "verdaccio@$verdaccio_version" --config "$work/config.yaml" --listen "127.0.0.1:$port") \
  >"$work/verdaccio.log" 2>&1 &
registry_pid=$!
deadline=$((SECONDS + 180))
until curl -sf "${url}-/ping" >/dev/null; do
  if ! kill -0 "$registry_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
    cat "$work/verdaccio.log" >&2
    echo "release-local: Verdaccio did not start" >&2
    exit 1
  fi
  sleep 0.2
done

# A throwaway user; its token authorises the publishes below and nothing else.
token=$(curl -sf -X PUT -H 'content-type: application/json' \
  -d '{"name":"galley","password":"galley-local"}' "${url}-/user/org.couchdb.user:galley" |
  node -e 'let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => console.log(JSON.parse(s).token))')

for pkg in "${packages[@]}"; do
  name=$(node -p "require('./$pkg/package.json').name + '@' + require('./$pkg/package.json').version")
  (cd "$pkg" && npm publish --registry "$url" "--${url#http:}:_authToken=$token" --ignore-scripts --silent)
  echo "release-local: published $name"
done

echo "Galley registry: $url"
echo "release-local: install with 'npm install --registry $url @galley/client'; Ctrl-C stops the registry"
wait "$registry_pid"

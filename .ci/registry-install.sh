#!/usr/bin/env bash
# The packages as a user gets them: publish all of them to a local registry (npm run release:local,
# a throwaway Verdaccio), then in an empty folder run docs/guides/using-galley.md's commands as
# written: `npm install @galley/client`, `npm install @galley/server` with onnxruntime-node's
# download skipped, the guide's program and tsconfig.json (skipLibCheck false, no DOM), `npx tsc`,
# and the program against `npx galley serve` on free ports. Fails on any error, on a type error in
# the packages' declarations, on a native addon left unbuilt, or on an answer other than the guide's.
# Usage: .ci/registry-install.sh [--no-build]   (passed to scripts/release-local.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
guide=$root/docs/guides/using-galley.md
work=$(mktemp -d "${TMPDIR:-/tmp}/galley-registry-install.XXXXXX")
registry_pgid=
server_pgid=
cleanup() {
  if [ -n "$server_pgid" ]; then kill -KILL -- "-$server_pgid" 2>/dev/null || true; fi
  if [ -n "$registry_pgid" ]; then
    kill -TERM -- "-$registry_pgid" 2>/dev/null || true
    wait "$registry_pgid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
say() { printf 'registry-install: %s\n' "$*"; }
fail() {
  echo "registry-install: $*" >&2
  exit 1
}

# wait_for LOG PATTERN PID SECONDS: until a line of LOG matches PATTERN; fails if PID ends first.
wait_for() {
  timeout "$4" bash -c "until grep -q '$2' '$1'; do kill -0 $3 2>/dev/null || exit 1; sleep 0.2; done" || {
    cat "$1" >&2
    fail "no line matching '$2' in $1"
  }
}

# guide_block NAME: the fenced block that follows `<!-- ci: NAME -->` in the guide.
guide_block() {
  awk -v marker="<!-- ci: $1 -->" '
    $0 == marker { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$guide" | grep . || fail "no block '<!-- ci: $1 -->' in $guide"
}
# run_block NAME: run the guide's shell block NAME in the application folder, echoing each command.
run_block() {
  say "guide block '$1':"
  guide_block "$1" >"$work/$1.sh"
  (cd "$app" && bash -euxo pipefail "$work/$1.sh")
}

say "publishing to a local registry (scripts/release-local.sh $*)"
setsid bash scripts/release-local.sh "$@" >"$work/registry.log" 2>&1 &
registry_pgid=$!
wait_for "$work/registry.log" '^Galley registry: ' "$registry_pgid" 900
grep '^release-local: published' "$work/registry.log"
url=$(sed -n 's/^Galley registry: //p' "$work/registry.log")

app=$work/app
mkdir "$app"
cd "$app"
# The local registry stands for npm's: @galley/* from it, everything else through it from npm.
echo "registry=$url" >.npmrc
npm init -y >/dev/null

run_block install-client
run_block install-server
say "package.json after the guide's commands:"
cat package.json
say "installed:"
npm ls --all 2>/dev/null | grep -E '@galley/|onnxruntime-node@'
native=node_modules/@galley/backends-native/build/Release/galley_native.node
[ -f "$native" ] || fail "@galley/backends-native's install script did not build $native"
say "built at install: $(cd node_modules/@galley/backends-native/build/Release && ls ./*.node | tr '\n' ' ')"
[ ! -e node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime_providers_cuda.so ] ||
  fail "onnxruntime-node's install script ran (it downloaded its CUDA provider)"

run_block setup-program
guide_block app.ts >app.ts
guide_block tsconfig.json >tsconfig.json
grep -q '"skipLibCheck": false' tsconfig.json || fail "the guide's tsconfig.json must check the packages' declarations"
mkdir models
cp -r "$root/examples/model_repository/simple" models/

say "npx galley serve on free ports"
setsid npx galley serve --model-repository ./models --http-port 0 --grpc-port 0 --metrics-port 0 \
  >"$work/serve.log" 2>&1 &
server_pgid=$!
wait_for "$work/serve.log" 'Ready: ' "$server_pgid" 120
cat "$work/serve.log"
http=$(sed -n 's/.*Started HTTPService at [^ ]*:\([0-9]*\).*/\1/p' "$work/serve.log")
grpc=$(sed -n 's/.*Started GRPCInferenceService at [^ ]*:\([0-9]*\).*/\1/p' "$work/serve.log")
[ -n "$http" ] && [ -n "$grpc" ] || fail "the server did not log its ports"

export GALLEY_HTTP_URL=http://127.0.0.1:$http GALLEY_GRPC_URL=http://127.0.0.1:$grpc
run_block run-program 2>&1 | tee "$work/program.out"
# The answers the guide promises, in its text block after "the program prints".
awk '/^It prints/ { found = 1; next } found && /^```/ { if (inside) exit; inside = 1; next } inside { print }' \
  "$guide" >"$work/expected.out"
grep -q . "$work/expected.out" || fail "no expected answers after 'It prints' in $guide"
grep -vxF -f <(grep -v -e '^+ ' -e '^$' "$work/program.out") "$work/expected.out" >"$work/missing.out" && {
  cat "$work/missing.out" >&2
  fail "the program did not print the guide's answers (missing lines above)"
}

server=$(pgrep -g "$server_pgid" -f 'bin/galley serve')
kill -TERM "$server"
timeout 60 tail --pid="$server" -f /dev/null || fail "the server did not exit within 60 s of SIGTERM"
grep -q 'Server stopped' "$work/serve.log" || fail "the server did not stop cleanly"
server_pgid=
say "the server stopped on SIGTERM"

# Last, so that a type error in the packages' declarations is reported after the answers above.
run_block type-check
say "ok: installed from $url, tsc found no errors (skipLibCheck false), the program printed the guide's answers"

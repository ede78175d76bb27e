#!/usr/bin/env bash
# The README's quick start, as a newcomer runs it in a clean clone: `npm start`, then the commands
# of the README's "Once it runs:" block, unchanged (they use the default ports 8000-8002), checked
# against the answers the README promises. Then SIGTERM, and the server must exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
block=$(mktemp)
trap 'rm -f "$log" "$block"; [ -n "${pgid:-}" ] && kill -KILL -- "-$pgid" 2>/dev/null || true' EXIT

for port in 8000 8001 8002; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "quick start: port $port is taken; the README's commands need it" >&2
    exit 1
  fi
done

# The fenced block after "Once it runs:".
awk '/^Once it runs:/ { found = 1; next } found && /^```/ { if (inside) exit; inside = 1; next } inside { print }' README.md >"$block"
grep -q 'curl' "$block" || { echo "quick start: no commands found after 'Once it runs:' in README.md" >&2; exit 1; }

setsid npm start >"$log" 2>&1 &
pgid=$!
if ! timeout 300 bash -c "until grep -q 'Ready: ' '$log'; do kill -0 $pgid 2>/dev/null || exit 1; sleep 0.2; done"; then
  cat "$log" >&2
  echo "quick start: npm start did not report the models ready" >&2
  exit 1
fi
out=$(bash "$block" 2>&1)
echo "$out"
grep -q '^HTTP/1.1 200' <<<"$out" || { echo "quick start: /v2/health/ready did not answer 200" >&2; exit 1; }
grep -q '"name":"OUTPUT0","datatype":"INT32","shape":\[1,16\],"data":\[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\]' <<<"$out" ||
  { echo "quick start: simple did not answer OUTPUT0 = INPUT0 + INPUT1" >&2; exit 1; }

# SIGTERM to the server itself, as a container runtime sends it; npm start then ends with its exit code.
server=$(pgrep -g "$pgid" -f '^node .*galley\.js serve')
kill -TERM "$server"
status=0
timeout 60 tail --pid="$pgid" -f /dev/null || { echo "quick start: the server did not exit within 60 s of SIGTERM" >&2; exit 1; }
wait "$pgid" || status=$?
pgid=
grep -q 'Server stopped' "$log" || { cat "$log" >&2; echo "quick start: the server did not stop cleanly" >&2; exit 1; }
[ "$status" -eq 0 ] || { cat "$log" >&2; echo "quick start: npm start exited $status after SIGTERM" >&2; exit 1; }
echo "quick start: the README's commands answered as documented; npm start exited 0 on SIGTERM"

#!/usr/bin/env bash
# Build the reference image with podman, run it on loopback and check it end to end: ready,
# HEALTHCHECK, a real inference over HTTP and over gRPC, metrics, and exit code 0 after SIGTERM
# (`podman stop -t 10`). Prints image size, build time and time-to-ready. Installs podman and runc
# when missing (Debian, as root). Everything podman writes lives in a scratch folder, with its own
# containers.conf and storage.conf (shared/CONTAINER.md); containers and images are removed by
# name, also on failure. Called by .ci/run after the tests; runs on its own too.
set -euo pipefail
cd "$(dirname "$0")/../.."
# podman's network helper (netavark) runs iptables from the sbin folders; a minimal PATH (a CI
# runner's, `env -i`) leaves them out and `podman run -p` fails with "No such file or directory".
case ":$PATH:" in *:/usr/sbin:*) ;; *) PATH="$PATH:/usr/sbin:/sbin" ;; esac
export PATH

say() { printf '[container] %s\n' "$*"; }
fail() {
  printf '[container] FAILED: %s\n' "$*" >&2
  exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- podman ----------------------------------------------------------------------------------
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v curl >/dev/null; then
  [ "$(id -u)" -eq 0 ] || fail "podman, runc and curl are needed: apt-get install podman runc curl (as root)"
  say "installing podman, runc and curl"
  t=$(now)
  # Another process may hold the apt/dpkg locks for a while after boot: wait instead of failing.
  for try in 1 2 3; do
    if apt-get -o DPkg::Lock::Timeout=400 -qq update &&
      DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=400 install -y -qq podman runc curl >/dev/null; then
      break
    fi
    [ "$try" -lt 3 ] || fail "apt-get could not install podman, runc and curl"
    sleep 10
  done
  say "installed in $(since "$t") s"
fi

work=$(mktemp -d /var/tmp/galley-container.XXXXXX)
name=galley-ci-$$
image=localhost/galley:ci-$$
base=localhost/galley-base:ci-$$
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
cat >"$work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
cat >"$work/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
CONF
export CONTAINERS_CONF=$work/containers.conf CONTAINERS_STORAGE_CONF=$work/storage.conf

cleanup() {
  local status=$?
  set +e
  if [ "$status" -ne 0 ] && podman container exists "$name" 2>/dev/null; then
    echo "--- last lines of the container's log ---" >&2
    podman logs --tail 60 "$name" >&2
  fi
  podman rm -f -t 0 "$name" >/dev/null 2>&1
  podman rmi -f "$image" "$base" >/dev/null 2>&1
  podman system reset --force >/dev/null 2>&1
  # Anything still mounted under the scratch folder (overlay) before it is removed.
  awk -v w="$work" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r | xargs -r umount -l 2>/dev/null
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build -----------------------------------------------------------------------------------
say "podman $(podman version --format '{{.Client.Version}}'), runc $(runc --version | awk 'NR == 1 { print $3 }')"
say "building the server (nx, cached when the tests built it)"
t=$(now)
npx nx run @galley/server:build --output-style=static >"$work/nx-build.log" 2>&1 || {
  cat "$work/nx-build.log" >&2
  fail "nx build"
}
say "server built in $(since "$t") s"

t=$(now)
deploy/container/prepare-context.sh "$work/context"
context_secs=$(since "$t")

t=$(now)
mapfile -t natives < <(find "$work/context/app/node_modules" -type f \( -name '*.node' -o -name '*.so*' \))
deploy/container/build-local-base.sh "$base" "${natives[@]}"
base_secs=$(since "$t")

t=$(now)
podman build --pull=never --format docker --build-arg "BASE=$base" \
  -f deploy/container/Containerfile -t "$image" "$work/context" >"$work/build.log" 2>&1 || {
  cat "$work/build.log" >&2
  fail "podman build"
}
build_secs=$(since "$t")
image_bytes=$(podman image inspect --format '{{.Size}}' "$image")
base_bytes=$(podman image inspect --format '{{.Size}}' "$base")
healthcheck=$(podman image inspect --format '{{json .HealthCheck}}' "$image")
case "$healthcheck" in *"/v2/health/ready"*) ;; *) fail "the image lost its HEALTHCHECK: $healthcheck" ;; esac
user=$(podman image inspect --format '{{.User}}' "$image")
case "${user%%:*}" in "" | root | 0) fail "the image runs as root ('$user')" ;; esac
say "built $image in $build_secs s: $((image_bytes / 1000000)) MB ($((base_bytes / 1000000)) MB of base)"

# --- run -------------------------------------------------------------------------------------
read -r http_port grpc_port metrics_port < <(node -e '
  const net = require("node:net");
  const servers = [0, 1, 2].map(() => net.createServer());
  Promise.all(servers.map((s) => new Promise((r) => s.listen(0, "127.0.0.1", () => r(s.address().port)))))
    .then((ports) => { console.log(ports.join(" ")); servers.forEach((s) => s.close()); });')

t=$(now)
# As deploy/kubernetes runs it: read-only root with a tmpfs /tmp, no capabilities, no privilege
# escalation. No systemd here to schedule healthchecks (podman says so on stderr, kept in
# podman.err): the check is run by hand below.
podman run -d --name "$name" --shm-size=64m --read-only --read-only-tmpfs=true \
  --cap-drop=all --security-opt=no-new-privileges \
  -p "127.0.0.1:$http_port:8000" -p "127.0.0.1:$grpc_port:8001" -p "127.0.0.1:$metrics_port:8002" \
  "$image" >/dev/null 2>>"$work/podman.err" || {
  cat "$work/podman.err" >&2
  fail "podman run"
}
deadline=$(($(date +%s) + 120))
until curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$http_port/v2/health/ready" 2>/dev/null; do
  state=$(podman inspect --format '{{.State.Status}}' "$name")
  [ "$state" = running ] || fail "the container is $state before it was ready"
  [ "$(date +%s)" -lt "$deadline" ] || fail "not ready after 120 s"
  sleep 0.2
done
ready_secs=$(since "$t")
say "ready in $ready_secs s (podman run to 200 on /v2/health/ready), HTTP :$http_port gRPC :$grpc_port metrics :$metrics_port"

# The image's HEALTHCHECK, run as the engine would (it allows 3 failures in a row).
for try in 1 2 3; do
  if podman healthcheck run "$name" >/dev/null 2>>"$work/podman.err"; then
    say "HEALTHCHECK: healthy"
    break
  fi
  if [ "$try" -eq 3 ]; then
    podman inspect --format '{{json .State.Health}}' "$name" >&2 || true
    fail "podman healthcheck run: unhealthy 3 times"
  fi
done

response=$(curl -fsS -m 10 "http://127.0.0.1:$http_port/v2/models/simple/infer" \
  -H 'Content-Type: application/json' -d '{"inputs":[
    {"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},
    {"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}') ||
  fail "HTTP infer"
RESPONSE=$response node -e '
  const { outputs } = JSON.parse(process.env.RESPONSE);
  const get = (n) => JSON.stringify(outputs.find((o) => o.name === n)?.data);
  const want0 = JSON.stringify(Array.from({ length: 16 }, (_, i) => i + 1));
  const want1 = JSON.stringify(Array.from({ length: 16 }, (_, i) => i - 1));
  if (get("OUTPUT0") !== want0 || get("OUTPUT1") !== want1) {
    console.error("wrong outputs: " + process.env.RESPONSE);
    process.exit(1);
  }' || fail "HTTP infer returned wrong outputs"
say "HTTP POST /v2/models/simple/infer: ok"

node deploy/container/grpc-infer.mjs "127.0.0.1:$grpc_port" | sed 's/^/[container] /'
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "gRPC infer"

metrics=$(curl -fsS -m 10 "http://127.0.0.1:$metrics_port/metrics") || fail "GET /metrics"
grep -Eq '^nv_inference_request_success\{model="simple",version="1"\} 2$' <<<"$metrics" ||
  fail "nv_inference_request_success for simple is not 2: $(grep '^nv_inference_request_success' <<<"$metrics")"
say "metrics: nv_inference_request_success{model=\"simple\"} 2"

# --- stop ------------------------------------------------------------------------------------
t=$(now)
podman stop -t 10 "$name" >/dev/null 2>>"$work/podman.err" || {
  cat "$work/podman.err" >&2
  fail "podman stop"
}
stop_secs=$(since "$t")
exit_code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
[ "$exit_code" = 0 ] || fail "exit code $exit_code after SIGTERM (137 means it was killed after 10 s)"
podman logs "$name" 2>&1 | grep -q "Server stopped" || fail "no 'Server stopped' in the log"
say "podman stop -t 10: exit code 0 after $stop_secs s"

printf '\n[container] summary: image %s MB (base %s MB), build %s s (context %s s, local base %s s), time-to-ready %s s, stop %s s\n' \
  "$((image_bytes / 1000000))" "$((base_bytes / 1000000))" "$build_secs" "$context_secs" "$base_secs" "$ready_secs" "$stop_secs"
say "container test passed"

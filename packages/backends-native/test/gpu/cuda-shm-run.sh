#!/usr/bin/env bash
# On the GPU machine, from the repository root, after prepare-carry.sh here (carry
# packages/backends-native/build/gpu-carry and packages/backends-native/dist): unpack Node, build
# galley_native.node with g++ (no libtorch needed: it only dlopens the driver), run the CUDA
# shared-memory check (cuda-shm-gpu.mjs, bundled with the server and the client). Logs and results
# go to $OUT/cuda-shm.
#   bash packages/backends-native/test/gpu/cuda-shm-run.sh
# After device-run.sh (which builds galley_native.node and the link below) the last line alone is enough.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
root=$(pwd)
carry=$root/packages/backends-native/build/gpu-carry
out=${OUT:-/tmp/galley-gpu-out}/cuda-shm
mkdir -p "$out" /tmp/galley-node/bin
xz -dc "$carry/node.xz" >/tmp/galley-node/bin/node && chmod +x /tmp/galley-node/bin/node
export PATH=/tmp/galley-node/bin:$PATH
cd packages/backends-native
mkdir -p build/Release
# The same command as device-run.sh's for galley_native.
# shellcheck disable=SC2046
g++ -O2 -std=c++17 -fPIC -fexceptions -Wall -DNAPI_VERSION=8 -DNAPI_CPP_EXCEPTIONS \
  -DNODE_GYP_MODULE_NAME=galley_native -DBUILDING_NODE_EXTENSION \
  -I"$carry/node-include" -I"$carry/node-addon-api" -shared -o build/Release/galley_native.node \
  $(ls native/*.cc | grep -v '/torch_') -ldl >"$out/build.log" 2>&1 || {
  echo "galley_native: FAILED (see $out/build.log)"
  exit 1
}
cd "$root"
mkdir -p "$carry/node_modules/@galley"
ln -sfn "$root/packages/backends-native" "$carry/node_modules/@galley/backends-native"
timeout "${GALLEY_GPU_TEST_TIMEOUT:-300}" node "$carry/cuda-shm-gpu.mjs" --out="$out" --python="${GALLEY_GPU_PYTHON:-python3}" \
  2>&1 | tee "$out/cuda-shm-gpu.log"
exit "${PIPESTATUS[0]}"

#!/usr/bin/env bash
# Here, before the H200 run: stage in packages/backends-native/build/gpu-carry (ignored by git,
# well under the 64 MiB a run may carry) what device-run.sh needs and git does not track: a Node
# binary (xz), Node-API and node-addon-api headers (the addon is built there with g++, no
# node-gyp), and the benchmark and the CUDA shared-memory check bundled with the server (no
# node_modules, no onnxruntime-node).
# Also builds packages/backends-native/dist, which the run carries too.
#   bash packages/backends-native/test/gpu/prepare-carry.sh    # NODE_MAJOR=22 by default
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
carry=packages/backends-native/build/gpu-carry
# Built first: a node-gyp rebuild would empty build/, the carry folder with it.
(cd packages/backends-native && npx tsc -p tsconfig.build.json)
(cd packages/server && npx tsc -p tsconfig.build.json) || echo "warning: the server's build reported errors (it emitted anyway)" >&2
(cd packages/client && npx tsc -p tsconfig.build.json)
rm -rf "$carry"
mkdir -p "$carry/node-include" "$carry/node-addon-api"
node_dir=$(.ci/fetch-node.sh "${NODE_MAJOR:-22}")
xz -6 -T0 -c "$node_dir/bin/node" >"$carry/node.xz"
cp "$node_dir"/include/node/{node_api.h,node_api_types.h,js_native_api.h,js_native_api_types.h} "$carry/node-include/"
cp node_modules/node-addon-api/{napi.h,napi-inl.h,napi-inl.deprecated.h} "$carry/node-addon-api/"
node_modules/.bin/esbuild bench/pytorch-backend.ts --bundle --platform=node --format=esm --target=node20 \
  --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/pytorch-backend.mjs"
# The CUDA shared-memory check (device-run.sh runs it), with the server and the client inside.
node_modules/.bin/esbuild packages/backends-native/test/gpu/cuda-shm-gpu.mjs --bundle --platform=node --format=esm \
  --target=node20 --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/cuda-shm-gpu.mjs"
# The torch_aoti check and benchmark (issue 49 item 4), likewise (its load processes are itself).
node_modules/.bin/esbuild packages/backends-native/test/gpu/aoti-gpu.mjs --bundle --platform=node --format=esm \
  --target=node20 --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/aoti-gpu.mjs"
# The PyTorch-2 model.py check (issue 49): the server's Python runtime on a KIND_GPU instance, likewise.
node_modules/.bin/esbuild packages/backends-native/test/gpu/pytorch2-gpu.mjs --bundle --platform=node --format=esm \
  --target=node20 --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/pytorch2-gpu.mjs"
# The device-tensor check and benchmark (CUDA shm in place, the GPU ensemble, 256 MiB), likewise.
node_modules/.bin/esbuild packages/backends-native/test/gpu/device-tensors-gpu.mjs --bundle --platform=node --format=esm \
  --target=node20 --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/device-tensors-gpu.mjs"
# GPU tensors in the Python backend (issue 50): CUDA IPC between the server and its stubs, likewise.
node_modules/.bin/esbuild packages/backends-native/test/gpu/python-gpu-tensors.mjs --bundle --platform=node --format=esm \
  --target=node20 --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/python-gpu-tensors.mjs"
# Its identity model is a scripted JS model: the js backend's worker entry, found beside the bundle.
node_modules/.bin/esbuild packages/server/src/backend/js/js-worker.ts --bundle --platform=node --format=esm \
  --target=node20 --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/js-worker.js"
# The text-to-video example's GPU check and benchmark (the GPU variant: --model-config-name gpu),
# and the node:http2 ceiling the MLP benchmark is read against.
for entry in examples/text-to-video/scripts/gpu-check.mjs:t2v-gpu-check bench/text-to-video.ts:text-to-video-bench \
  bench/http2-ceiling.ts:http2-ceiling; do
  node_modules/.bin/esbuild "${entry%%:*}" --bundle --platform=node --format=esm --target=node20 \
    --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
    --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
    --outfile="$carry/${entry##*:}.mjs"
done
# Its scripted models are TypeScript: the worker imports them through tsx (and its esbuild).
mkdir -p "$carry/node_modules/@esbuild"
cp -r node_modules/tsx node_modules/esbuild "$carry/node_modules/"
cp -r node_modules/@esbuild/linux-x64 "$carry/node_modules/@esbuild/"
echo '{"type":"module"}' >"$carry/package.json"
# The server itself, for test/gpu/nvml-gpu.mjs to scrape a real /metrics (createServer, createLogger).
node_modules/.bin/esbuild packages/server/src/index.ts --bundle --platform=node --format=esm --target=node20 \
  --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
  --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
  --outfile="$carry/galley-server.mjs"
du -sh "$carry" packages/backends-native/dist
echo "carry: [\"$carry\", \"packages/backends-native/dist\"]"

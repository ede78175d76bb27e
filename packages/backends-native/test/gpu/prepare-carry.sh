#!/usr/bin/env bash
# Here, before the H200 run: stage in packages/backends-native/build/gpu-carry (ignored by git,
# well under the 64 MiB a run may carry) what device-run.sh needs and git does not track: a Node
# binary (xz), Node-API and node-addon-api headers (the addon is built there with g++, no
# node-gyp), the benchmark and the CUDA shared-memory check bundled with the server, and what the
# bundles load at run time (tsx; onnxruntime-node for the videosapi step) in node_modules.tar.xz.
# Also builds packages/backends-native/dist, which the run carries too.
#   bash packages/backends-native/test/gpu/prepare-carry.sh    # NODE_MAJOR=22 by default
#   GALLEY_GPU_STEPS="build pt2" bash packages/backends-native/test/gpu/prepare-carry.sh   # those steps only
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
# Each step's bundle, with the server and the client inside (no node_modules, no onnxruntime-node):
# only those of the steps asked for (GALLEY_GPU_STEPS, as device-run.sh reads it; default all), so
# that the carry and the tracked files stay under the 64 MiB a run may take.
steps=" ${GALLEY_GPU_STEPS:-build test checks aoti pt2 t2v bench pygpu ddim stubmem memory multigpu t2vreal videosapi} "
want() { for s in "$@"; do case "$steps" in *" $s "*) return 0 ;; esac; done; return 1; }
bundle() { # entry, outfile name
  node_modules/.bin/esbuild "$1" --bundle --platform=node --format=esm --target=node20 \
    --external:onnxruntime-node --external:@galley/backends-native --external:tsx --log-level=warning \
    --banner:js="import { createRequire as __galleyRequire } from 'node:module'; const require = __galleyRequire(import.meta.url);" \
    --outfile="$carry/$2"
}
# The PyTorch backend benchmark, and the node:http2 ceiling the MLP benchmark is read against.
want bench && bundle bench/pytorch-backend.ts pytorch-backend.mjs && bundle bench/http2-ceiling.ts http2-ceiling.mjs
# The CUDA shared-memory check; the device-tensor check (CUDA shm in place, the GPU ensemble, 256
# MiB); the server itself, for test/gpu/nvml-gpu.mjs to scrape a real /metrics.
want checks && bundle packages/backends-native/test/gpu/cuda-shm-gpu.mjs cuda-shm-gpu.mjs &&
  bundle packages/backends-native/test/gpu/device-tensors-gpu.mjs device-tensors-gpu.mjs &&
  bundle packages/server/src/index.ts galley-server.mjs
# The torch_aoti check and benchmark (issue 49 item 4; its load processes are itself).
want aoti && bundle packages/backends-native/test/gpu/aoti-gpu.mjs aoti-gpu.mjs
# The PyTorch-2 model.py check (issue 49): the server's Python runtime on a KIND_GPU instance.
want pt2 && bundle packages/backends-native/test/gpu/pytorch2-gpu.mjs pytorch2-gpu.mjs
# GPU tensors in the Python backend (issue 50): CUDA IPC between the server and its stubs.
want pygpu && bundle packages/backends-native/test/gpu/python-gpu-tensors.mjs python-gpu-tensors.mjs
# ...which also runs NVIDIA's DLPack QA models unchanged: taken from a clone of
# triton-inference-server/server (GALLEY_TRITON_SERVER_GIT, bare or not; never copied into the repository).
if want pygpu; then
  qa_git=${GALLEY_TRITON_SERVER_GIT:-/work/.mirror/triton-inference-server+server/repo}
  [ -d "$qa_git/.git" ] && qa_git=$qa_git/.git
  mkdir -p "$carry/triton-qa"
  if git --git-dir="$qa_git" archive HEAD qa/python_models/{dlpack_identity,dlpack_add_sub,dlpack_io_identity,dlpack_empty_output,variable_gpu_output,dlpack_test,ensemble_io} |
    tar -x -C "$carry/triton-qa" --strip-components=1; then
    echo "NVIDIA's QA models: $(ls "$carry/triton-qa/python_models" | tr '\n' ' ')"
  else
    echo "warning: no triton-inference-server/server clone at $qa_git: the pygpu check will report its QA models missing" >&2
  fi
fi
# The DDIM loop in model.py through BLS into a libtorch denoiser (issue 50 item 4).
want ddim && bundle packages/backends-native/test/gpu/python-ddim.mjs python-ddim.mjs
# What a Python stub costs on the GPU (issue 50 item 3).
want stubmem && bundle packages/backends-native/test/gpu/python-stub-memory.mjs python-stub-memory.mjs
# The GPU memory budget and GPU-memory admission (issue 52).
want memory && bundle packages/backends-native/test/gpu/memory-gpu.mjs memory-gpu.mjs
# Several GPUs in one server (issue 55).
want multigpu && bundle packages/backends-native/test/gpu/multi-gpu.mjs multi-gpu.mjs
# The text-to-video example's GPU check and benchmark (the GPU variant: --model-config-name gpu).
want t2v && bundle examples/text-to-video/scripts/gpu-check.mjs t2v-gpu-check.mjs
want t2v t2vreal && bundle bench/text-to-video.ts text-to-video-bench.mjs
# Issue 51's benchmark on real-size models: a server over HTTP for baseline (iii) (Python backend).
want t2vreal && bundle examples/text-to-video/scripts/serve-http.ts t2v-serve-http.mjs
# The videos API against the gRPC stream on the CPU text-to-video example (issue 53 item 8), and
# the worker entries its server starts besides the js backend's: ONNX Runtime's sessions, the video
# encoder, the microsecond timers (found beside the bundles, as js-worker.js is).
if want videosapi; then
  bundle bench/videos-api.ts videos-api.mjs
  bundle packages/server/src/backend/onnxruntime/ort-worker.ts ort-worker.js
  bundle packages/server/src/jobs/encode-worker.ts encode-worker.js
  bundle packages/server/src/base/timer-worker.ts timer-worker.js
fi
# Scripted (JS) models in these checks: the js backend's worker entry, found beside the bundles; its
# TypeScript models go through tsx (and its esbuild).
bundle packages/server/src/backend/js/js-worker.ts js-worker.js
# ...and the PyTorch backend's direct runner, which that worker imports for BLS calls marked
# `direct` (the pipeline's denoiser steps): without it beside the bundles those calls went the
# usual way on every GPU run before 2026-12-07 16:30.
bundle packages/server/src/backend/pytorch/pytorch-direct.ts pytorch-direct.js
# What the bundles load from node_modules at run time, xz-compressed (device-run.sh unpacks it into
# $carry/node_modules): tsx and esbuild; for ONNX models, onnxruntime-node (its JS, its Linux x64
# binding and library) and onnxruntime-common.
modules=()
want checks t2v t2vreal pygpu stubmem videosapi && modules+=(tsx esbuild @esbuild/linux-x64)
want videosapi && modules+=(onnxruntime-node/package.json onnxruntime-node/dist
  onnxruntime-node/bin/napi-v6/linux/x64/{onnxruntime_binding.node,libonnxruntime.so.1}
  onnxruntime-common/package.json onnxruntime-common/dist)
if [ ${#modules[@]} -gt 0 ]; then
  tar -c -C node_modules "${modules[@]}" | xz -6 -T0 >"$carry/node_modules.tar.xz"
fi
echo '{"type":"module"}' >"$carry/package.json"
du -sh "$carry" packages/backends-native/dist
# What a run takes: these and the tracked files (64 MiB at most).
echo "with the tracked files: $((($(du -sbc "$carry" packages/backends-native/dist | tail -1 | cut -f1) + \
  $(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s }')) / 1048576)) MiB"
echo "carry: [\"$carry\", \"packages/backends-native/dist\"]"

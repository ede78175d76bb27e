#!/usr/bin/env bash
# On the GPU machine, from the repository root, after prepare-carry.sh here (carry
# packages/backends-native/build/gpu-carry and packages/backends-native/dist): unpack Node, build
# galley_torch.node with g++ against the torch that python3 imports (its CUDA libtorch), run the
# GPU check (npm run test:gpu's script) and the benchmark. Logs and results go to $OUT.
#   bash packages/backends-native/test/gpu/device-run.sh
# GALLEY_GPU_DEVICE=cpu GALLEY_GPU_SMALL=1 runs the same steps on a CPU machine (a check of this script).
# GALLEY_GPU_STEPS picks steps (default all: "build test checks aoti pt2 t2v bench"; "pygpu", GPU tensors
# in the Python backend, "ddim", a DDIM loop in model.py through BLS, "handoff", what crossing
# between two processes' CUDA contexts costs a step (needs no "build"), "mps", that and "ddim"
# --graphs under a private CUDA MPS daemon, "stubmem", the GPU memory of
# Python stubs, "memory", the GPU memory budget and admission (issue 52), "multigpu", several GPUs in one server
# (issue 55; on a machine of one GPU its two-GPU parts print NOT RUN), "t2vreal", the text-to-video benchmark on real-size untrained models,
# and "videosapi", bench/videos-api.ts on the CPUs (issue 53 item 8; needs no GPU and no "build"), run only
# when named); a later call on the
# same warm machine can leave out "build" (the addons built by an earlier call are still there).
#   GALLEY_GPU_STEPS=videosapi bash packages/backends-native/test/gpu/device-run.sh   # log: $OUT/videos-api.log
set -uo pipefail
export NCCL_NVLS_ENABLE=0
root=$(pwd)
carry=$root/packages/backends-native/build/gpu-carry
out=${OUT:-/tmp/galley-gpu-out}
device=${GALLEY_GPU_DEVICE:-cuda}
small=${GALLEY_GPU_SMALL:+--small}
python=${GALLEY_GPU_PYTHON:-python3}
steps=" ${GALLEY_GPU_STEPS:-build test checks aoti pt2 t2v bench} "
step() { case "$steps" in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
mkdir -p "$out" /tmp/galley-node/bin
xz -dc "$carry/node.xz" >/tmp/galley-node/bin/node && chmod +x /tmp/galley-node/bin/node
export PATH=/tmp/galley-node/bin:$PATH
# What the bundles load from node_modules at run time (tsx; ONNX Runtime for videosapi).
if [ -f "$carry/node_modules.tar.xz" ]; then
  mkdir -p "$carry/node_modules" && tar -xJf "$carry/node_modules.tar.xz" -C "$carry/node_modules"
fi
{
  echo "node $(node --version)"
  "$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())'
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || true
} | tee "$out/machine.txt"

cd packages/backends-native
find=native/torch/torch_find.cjs
if step build; then
echo "libtorch: $(node $find where)" | tee "$out/build.log"
cuda_define=$([ "$(node $find cuda)" = 1 ] && echo -DGALLEY_TORCH_CUDA)
mkdir -p build/Release build/gpu-obj
start=$(date +%s)
# C++17 as binding.gyp builds it; C++20 if that torch's headers want it.
for std in ${GALLEY_CXX_STD:-c++17 c++20}; do
  echo "compiling with -std=$std" >>"$out/build.log"
  pids=()
  for src in $(cd native/torch && ls *.cc | sed 's/\.cc$//'); do
    # shellcheck disable=SC2046
    g++ -O2 -std="$std" -fPIC -fexceptions -frtti -Wall -DNAPI_VERSION=8 -DNAPI_CPP_EXCEPTIONS \
      -DNODE_GYP_MODULE_NAME=galley_torch -DBUILDING_NODE_EXTENSION $cuda_define \
      -I"$carry/node-include" -I"$carry/node-addon-api" $(node $find cflags) \
      -c "native/torch/$src.cc" -o "build/gpu-obj/$src.o" >>"$out/build.log" 2>&1 &
    pids+=($!)
  done
  ok=1
  for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
  [ $ok = 1 ] && break
done
# shellcheck disable=SC2046
[ $ok = 1 ] && g++ -shared -o build/Release/galley_torch.node build/gpu-obj/*.o $(node $find libs) >>"$out/build.log" 2>&1 || ok=0
echo "build: $([ $ok = 1 ] && echo ok || echo FAILED) in $(($(date +%s) - start)) s (-std=$std)" | tee -a "$out/build.log"
[ $ok = 1 ] || exit 1
# The main addon too: the server finds its GPUs through its CUDA probe (and maps shared memory).
g++ -O2 -std=c++17 -fPIC -fexceptions -Wall -DNAPI_VERSION=8 -DNAPI_CPP_EXCEPTIONS \
  -DNODE_GYP_MODULE_NAME=galley_native -DBUILDING_NODE_EXTENSION \
  -I"$carry/node-include" -I"$carry/node-addon-api" -shared -o build/Release/galley_native.node \
  native/memory/*.cc -ldl >>"$out/build.log" 2>&1 &&
  echo "galley_native: ok" | tee -a "$out/build.log" || echo "galley_native: FAILED" | tee -a "$out/build.log"
fi

test_status=0
if step test; then
  timeout "${GALLEY_GPU_TEST_TIMEOUT:-240}" node test/gpu/torch-gpu.mjs --device="$device" $small --python="$python" --out="$out/test-gpu" 2>&1 | tee "$out/test-gpu.log"
  test_status=${PIPESTATUS[0]}
fi

# The bundles in the carry find the addon package through this link, and the Python backend's
# stub where a bundle in build/gpu-carry looks for it (three folders up, as from dist/).
mkdir -p "$carry/node_modules/@galley"
ln -sfn "$root/packages/backends-native" "$carry/node_modules/@galley/backends-native"
ln -sfn "$root/packages/server/python" "$root/packages/python"
# The other GPU checks (CUDA graphs, NVML metrics, CUDA shared memory), each where it exists.
check_status=0
# cuda-shm-gpu imports the client and the server: prepare-carry.sh bundles it into the carry.
# device-tensors-gpu: CUDA shm in place for libtorch, the GPU ensemble's device hand-off, 256 MiB.
for check in test/gpu/torch-graphs-gpu.mjs test/gpu/nvml-gpu.mjs "$carry/cuda-shm-gpu.mjs" "$carry/device-tensors-gpu.mjs"; do
  [ -f "$check" ] && step checks || continue
  name=$(basename "$check" .mjs)
  # GALLEY_GPU_SKIP: names of checks to leave out of this run (e.g. "nvml-gpu cuda-shm-gpu").
  case " ${GALLEY_GPU_SKIP:-} " in *" $name "*) continue ;; esac
  limit=${GALLEY_GPU_CHECK_TIMEOUT:-150}
  [ "$name" = device-tensors-gpu ] && limit=${GALLEY_GPU_DEVICE_TENSORS_TIMEOUT:-240}
  timeout "$limit" node "$check" --python="$python" --out="$out/$name" 2>&1 | tee "$out/$name.log"
  [ "${PIPESTATUS[0]}" = 0 ] || check_status=1
done

# GPU tensors in the Python backend (issue 50): CUDA shm inputs into model.py on the GPU, BLS on the
# device with torch between the calls, host bytes, GPU memory over 1,000 requests
# (GALLEY_PYGPU_ARGS: e.g. --requests=10000).
pygpu_status=0
if step pygpu && [ -f "$carry/python-gpu-tensors.mjs" ]; then
  timeout "${GALLEY_PYGPU_TIMEOUT:-300}" node "$carry/python-gpu-tensors.mjs" --device="$device" --python="$python" --out="$out/python-gpu-tensors" \
    ${GALLEY_PYGPU_ARGS:-} 2>&1 | tee "$out/python-gpu-tensors.log"
  pygpu_status=${PIPESTATUS[0]}
  check_status=$((check_status || pygpu_status))
fi

# A diffusers-style DDIM loop in model.py (issue 50 item 4): 20 steps, each a BLS call into a libtorch
# denoiser on the GPU, against the same loop in plain Python: outputs, host bytes per step, step time,
# GPU memory (GALLEY_DDIM_ARGS: e.g. --batches=1,4,8 --depth=10 --reps=20).
ddim_status=0
if step ddim && [ -f "$carry/python-ddim.mjs" ]; then
  timeout "${GALLEY_DDIM_TIMEOUT:-300}" node "$carry/python-ddim.mjs" --device="$device" --python="$python" --out="$out/python-ddim" \
    ${GALLEY_DDIM_ARGS:-} 2>&1 | tee "$out/python-ddim.log"
  ddim_status=${PIPESTATUS[0]}
  check_status=$((check_status || ddim_status))
fi

# What the GPU pays to hand a step between two processes' contexts (the floor of a model.py step
# over the plain-Python loop's, issue 50): spin kernels, one stream / two streams / two processes.
if step handoff; then
  timeout "${GALLEY_HANDOFF_TIMEOUT:-180}" "$python" test/gpu/handoff.py ${GALLEY_HANDOFF_ARGS:-} 2>&1 | tee "$out/handoff.log"
fi
# The same crossing, and the DDIM check with the denoiser as CUDA graphs, under CUDA MPS (one GPU
# context for every process: no switch between the server's and a stub's): a private MPS daemon
# whose pipe directory only these commands are given, quit afterwards. Not run where the machine
# has no nvidia-cuda-mps-control, or where the daemon does not answer.
if step mps; then
  if command -v nvidia-cuda-mps-control >/dev/null; then
    mps=$(mktemp -d /tmp/galley-mps.XXXXXX)
    with_mps() { CUDA_MPS_PIPE_DIRECTORY=$mps/pipe CUDA_MPS_LOG_DIRECTORY=$mps/log "$@"; }
    mkdir -p "$mps/pipe" "$mps/log"
    mps_up() { echo get_default_active_thread_percentage | with_mps timeout 10 nvidia-cuda-mps-control; }
    with_mps nvidia-cuda-mps-control -d
    for _ in 1 2 3 4 5 6 7 8 9 10; do mps_up && break; sleep 0.5; done
    if mps_up; then
      with_mps timeout "${GALLEY_HANDOFF_TIMEOUT:-180}" "$python" test/gpu/handoff.py ${GALLEY_HANDOFF_ARGS:-} 2>&1 | sed 's/^handoff:/handoff (MPS):/' | tee "$out/handoff-mps.log"
      with_mps timeout "${GALLEY_DDIM_TIMEOUT:-300}" node "$carry/python-ddim.mjs" --device="$device" --python="$python" --out="$out/python-ddim-mps" \
        ${GALLEY_MPS_DDIM_ARGS:---reps=8 --graphs} 2>&1 | tee "$out/python-ddim-mps.log"
    else
      echo "MPS: the daemon did not start or answer: $(cat "$mps"/log/*.log 2>/dev/null | tail -5)" | tee "$out/handoff-mps.log"
    fi
    echo quit | with_mps timeout 10 nvidia-cuda-mps-control
    rm -rf "$mps"
  else
    echo "MPS: no nvidia-cuda-mps-control on this machine" | tee "$out/handoff-mps.log"
  fi
fi

# What a Python stub costs on the GPU (issue 50 item 3): MiB per stub process for a model that never
# uses CUDA and for torch on CUDA with 1, 2 and 4 instances, loaded one at a time (explicit mode).
stubmem_status=0
if step stubmem && [ -f "$carry/python-stub-memory.mjs" ]; then
  timeout "${GALLEY_STUBMEM_TIMEOUT:-300}" node "$carry/python-stub-memory.mjs" --device="$device" --python="$python" --out="$out/python-stub-memory" \
    ${GALLEY_STUBMEM_ARGS:-} 2>&1 | tee "$out/python-stub-memory.log"
  stubmem_status=${PIPESTATUS[0]}
  check_status=$((check_status || stubmem_status))
fi

# Memory-aware serving (issue 52): three TorchScript models of 2 GiB FP16 weights each served in turn
# under --model-memory-budget gpu0 (answers, evictions, GPU figures), and 16 concurrent requests that
# run out of GPU memory without --gpu-memory-admission and must all succeed with it, the same for
# 16 sequences under the sequence batcher, and a Python stub's GPU working memory per batch size
# (GALLEY_MEMORY_ARGS: e.g. --gib=4, --parts=cd).
memory_status=0
if step memory && [ -f "$carry/memory-gpu.mjs" ]; then
  timeout "${GALLEY_MEMORY_TIMEOUT:-420}" node "$carry/memory-gpu.mjs" --device="$device" --python="$python" --out="$out/memory-gpu" \
    ${GALLEY_MEMORY_ARGS:-} 2>&1 | tee "$out/memory-gpu.log"
  memory_status=${PIPESTATUS[0]}
  check_status=$((check_status || memory_status))
fi

# Several GPUs in one server (issue 55): data parallel (gpus [0] vs [0, 1], a DiT-XL/2-shaped
# denoiser, target ≥ 1.8×), an ensemble split over GPUs 0 and 1 (0 host bytes between the stages),
# CUDA shared memory on device 1 read by models on GPUs 1 and 0, Triton's load error for a missing
# GPU, CUDA_VISIBLE_DEVICES. Runs on any number of GPUs: on one, the parts that need two print
# "NOT RUN ...: needs ≥ 2 GPUs" (GALLEY_MULTIGPU_ARGS=--require-gpus=2 makes them fail instead;
# e.g. also --latent=64 for 1,024 tokens, --seconds=20).
multigpu_status=0
if step multigpu && [ -f "$carry/multi-gpu.mjs" ]; then
  timeout "${GALLEY_MULTIGPU_TIMEOUT:-540}" node "$carry/multi-gpu.mjs" --device="$device" --python="$python" --out="$out/multi-gpu" \
    ${GALLEY_MULTIGPU_ARGS:-} 2>&1 | tee "$out/multi-gpu.log"
  multigpu_status=${PIPESTATUS[0]}
  check_status=$((check_status || multigpu_status))
  cp "$out/multi-gpu/multi-gpu.json" "$out/" 2>/dev/null
fi

# torch_aoti (issue 49 item 4): packages compiled here for CUDA (FP16, BF16, FP32), checked against
# the exported program in Python through the addon and a server (gRPC + CUDA shared memory), timed
# against TorchScript and eager Python. Its packages stay in GALLEY_AOTI_OUT (outside the tree), so
# a second call on the warm machine skips the compiles: GALLEY_AOTI_ARGS=--make-only compiles only.
aoti_status=0
if step aoti && [ -f "$carry/aoti-gpu.mjs" ]; then
  aoti_out=${GALLEY_AOTI_OUT:-/tmp/galley-aoti}
  timeout "${GALLEY_AOTI_TIMEOUT:-540}" node "$carry/aoti-gpu.mjs" --device="$device" $small --python="$python" \
    --out="$aoti_out" ${GALLEY_AOTI_ARGS:-} 2>&1 | tee "$out/aoti-gpu.log"
  aoti_status=${PIPESTATUS[0]}
  cp "$aoti_out/aoti-gpu.json" "$out/" 2>/dev/null
  [ -f "$aoti_out/server.log" ] && tail -c 200000 "$aoti_out/server.log" >"$out/aoti-server.log"
fi

# PyTorch-2 model.py (issue 49 item 2) on a KIND_GPU instance: served against eager Python, timed.
pt2_status=0
if step pt2 && [ -f "$carry/pytorch2-gpu.mjs" ]; then
  timeout "${GALLEY_PT2_TIMEOUT:-300}" node "$carry/pytorch2-gpu.mjs" --device="$device" --python="$(command -v "$python")" \
    --out="$out/pytorch2" 2>&1 | tee "$out/pytorch2-gpu.log"
  pt2_status=${PIPESTATUS[0]}
fi

cd "$root"
# The text-to-video example's GPU variant: its check (each TorchScript model on the GPU against a
# reference, a video, 8 users) and its benchmark (pipeline vs step by step, 1/4/8 users).
t2v_status=0
if step t2v && [ -f "$carry/t2v-gpu-check.mjs" ]; then
  models=$root/examples/text-to-video/models
  t2v_cpu=$([ "$device" = cpu ] && echo --cpu)
  timeout "${GALLEY_T2V_TIMEOUT:-150}" node "$carry/t2v-gpu-check.mjs" --models="$models" --reference=torch $t2v_cpu >"$out/t2v-gpu-check.json" 2>"$out/t2v-gpu-check.log"
  t2v_status=$?
  echo "text-to-video GPU check exit $t2v_status: $(tr -d ' \n' <"$out/t2v-gpu-check.json" | head -c 1500)"
  if [ "$device" = cuda ]; then
    timeout "${GALLEY_T2V_BENCH_TIMEOUT:-240}" node "$carry/text-to-video-bench.mjs" --config=gpu --models="$models" \
      ${GALLEY_T2V_BENCH_ARGS:---reps=1 --videos=2} 2>&1 | tee "$out/t2v-bench.log"
    [ "${PIPESTATUS[0]}" = 0 ] || t2v_status=1
  fi
fi
# Issue 51's benchmark on the real-size, UNTRAINED models (only when named: GALLEY_GPU_STEPS=t2vreal):
# examples/text-to-video/scripts/real-benchmark.py generates models-real outside the tree (full size,
# FP16; --small on a CPU), then per resolution (256, 1,024, 4,096 tokens) and user count runs
# baselines (i), (ii), (iii) (the loop in a Python-backend model.py, served by the bundled
# scripts/serve-http.ts) and Galley's pipeline (the bundled bench, --config=gpu). GALLEY_T2VREAL_ARGS
# replaces the sizes (e.g. "--resolutions 256x256 --users 1,8 --steps 10").
if step t2vreal && [ -f "$carry/text-to-video-bench.mjs" ]; then
  if [ "$device" = cpu ]; then
    # The GPU configs with KIND_CPU (the bundle has no ONNX Runtime for the CPU configs' Real-ESRGAN).
    t2vreal_args=${GALLEY_T2VREAL_ARGS:---small --resolutions 256x256 --users 1,2 --frames 3 --steps 3}
    t2vreal_config=(--config gpu --kind-cpu)
  else
    t2vreal_args=${GALLEY_T2VREAL_ARGS:---graphs --trace}
    t2vreal_config=(--config gpu)
  fi
  # shellcheck disable=SC2086
  timeout "${GALLEY_T2VREAL_TIMEOUT:-540}" "$python" examples/text-to-video/scripts/real-benchmark.py --python="$(command -v "$python")" \
    --device "$device" --out "$out/t2v-real" --bench "node $carry/text-to-video-bench.mjs" \
    --serve "node $carry/t2v-serve-http.mjs" "${t2vreal_config[@]}" $t2vreal_args \
    2>&1 | tee "$out/t2v-real.log"
  [ "${PIPESTATUS[0]}" = 0 ] || t2v_status=1
fi
# The videos API (issue 53 item 8; only when named: GALLEY_GPU_STEPS=videosapi): bench/videos-api.ts,
# bundled, on the CPU text-to-video example (ONNX Runtime and scripted models: no GPU, no addon, no
# build step): --jobs videos at once through /v1/videos against the same videos over the gRPC
# stream, in interleaved rounds, on this machine's otherwise idle CPUs. GALLEY_VIDEOSAPI_ARGS
# replaces the options (e.g. "--stores=sqlite,postgres --rounds=15"; PostgreSQL only where its
# server binaries are, else the bench prints that it skipped it).
videosapi_status=0
if step videosapi && [ -f "$carry/videos-api.mjs" ]; then
  # shellcheck disable=SC2086
  timeout "${GALLEY_VIDEOSAPI_TIMEOUT:-540}" node --expose-gc "$carry/videos-api.mjs" --models="$root/examples/text-to-video/models" \
    ${GALLEY_VIDEOSAPI_ARGS:---stores=sqlite --rounds=15} 2>&1 | tee "$out/videos-api.log"
  videosapi_status=${PIPESTATUS[0]}
fi
bench_status=0
step bench || { echo "test:gpu exit $test_status, other checks $check_status, aoti $aoti_status, pytorch2 $pt2_status, text-to-video $t2v_status, videos API $videosapi_status"; exit $((test_status || check_status || aoti_status || pt2_status || t2v_status || videosapi_status)); }
timeout "${GALLEY_GPU_BENCH_TIMEOUT:-300}" node "$carry/pytorch-backend.mjs" --device="$device" $small --python="$python" --out="$out/bench" \
  --script="$root/packages/server/test/fixtures/pytorch/bench_models.py" ${GALLEY_BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
bench_status=${PIPESTATUS[0]}
# GALLEY_BENCH_ARGS2: the benchmark once more with other options (an A/B in the same run).
if [ -n "${GALLEY_BENCH_ARGS2:-}" ]; then
  timeout "${GALLEY_GPU_BENCH_TIMEOUT:-300}" node "$carry/pytorch-backend.mjs" --device="$device" $small --python="$python" --out="$out/bench2" \
    --script="$root/packages/server/test/fixtures/pytorch/bench_models.py" $GALLEY_BENCH_ARGS2 2>&1 | tee "$out/bench2.log"
fi
cp "$out/bench/pytorch-backend.json" "$out/test-gpu/torch-gpu.json" "$out/" 2>/dev/null
echo "test:gpu exit $test_status, other checks $check_status, aoti $aoti_status, pytorch2 $pt2_status, text-to-video $t2v_status, videos API $videosapi_status, bench exit $bench_status"
exit $((test_status || check_status || aoti_status || pt2_status || t2v_status || videosapi_status || bench_status))

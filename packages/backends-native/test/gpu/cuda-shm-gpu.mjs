// CUDA shared memory on a GPU (issue 19, items 1, 2, 5): a Galley server in a child process (CUDA IPC
// handles do not open in the process that made them), an identity JS model, and regions made by
// @galley/client's CudaSharedMemory (gRPC and REST) and by a Python process (cudaMalloc +
// cudaIpcGetMemHandle through ctypes, registered over HTTP with base64 as Triton's Python client
// does); input and output in CUDA shared memory, bytes checked; then Triton's errors on the real
// GPU. prepare-carry.sh bundles this file (server and client inside) into build/gpu-carry, so it
// runs with Node alone:
//
//   node packages/backends-native/build/gpu-carry/cuda-shm-gpu.mjs --out=$OUT/cuda-shm
//
// Options: --out=DIR (results: cuda-shm-gpu.json, logs; a temporary folder by default),
// --python=python3 (a Python with torch and the CUDA runtime wheel), --device=0, --big=268435456
// (bytes of the timed FP32 round trip; 0 skips it). Prints one line per check and a summary;
// exits 1 if any check failed.
import { fork, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CudaSharedMemory, createGrpcClient, createRestClient } from "@galley/client";
import { createChecks } from "./checks.mjs";

const arg = (name, fallback) => process.argv.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? fallback;

async function main() {
  const out = arg("out", mkdtempSync(join(tmpdir(), "galley-cuda-shm-")));
  const python = arg("python", "python3");
  const device = Number(arg("device", "0"));
  const big = Number(arg("big", String(256 * 1024 * 1024)));
  mkdirSync(out, { recursive: true });
  const { results, check, attempt } = createChecks();
  const expectError = async (name, promise, text) => {
    const error = await promise.then(
      () => undefined,
      (e) => e,
    );
    const message = String(error?.rawMessage ?? error?.message ?? "");
    check(name, error !== undefined && message.includes(text), error ? message : "succeeded");
  };

  // An identity model (FP32, any length) scripted in JS, so every byte is checked exactly.
  const repo = join(out, "models");
  mkdirSync(join(repo, "identity_fp32", "1"), { recursive: true });
  writeFileSync(
    join(repo, "identity_fp32", "config.pbtxt"),
    `name: "identity_fp32"\nbackend: "js"\nmax_batch_size: 0\n` +
      `input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n` +
      `output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n`,
  );
  writeFileSync(
    join(repo, "identity_fp32", "1", "model.mjs"),
    "export default class { execute(requests) { return requests.map((r) => { const i = r.input('INPUT0');" +
      " return { outputs: [{ name: 'OUTPUT0', datatype: 'FP32', shape: i.shape, data: i.data }] }; }); } }\n",
  );

  const serverLog = join(out, "server.log");
  const child = fork(process.argv[1], ["--serve", repo], { stdio: ["ignore", "pipe", "pipe", "ipc"] });
  const logChunks = [];
  child.stdout.on("data", (d) => logChunks.push(d));
  child.stderr.on("data", (d) => logChunks.push(d));
  const ports = await new Promise((resolve, reject) => {
    child.once("message", resolve);
    child.once("exit", (code) => reject(new Error(`the server exited with ${code}: ${Buffer.concat(logChunks)}`)));
  });
  check("server starts with the identity model", ports.failed.length === 0, JSON.stringify(ports));
  const base = `http://127.0.0.1:${ports.http}`;
  const grpc = createGrpcClient({ baseUrl: `http://127.0.0.1:${ports.grpc}` });
  const rest = createRestClient({ baseUrl: base });
  const model = "identity_fp32";
  const floats = (n, seed) => Float32Array.from({ length: n }, (_, i) => (i * 0.25 + seed) % 1000);
  const same = (a, b) => a.byteLength === b.byteLength && Buffer.compare(Buffer.from(a), Buffer.from(b)) === 0;

  try {
    // 1. Our client's regions, over gRPC then REST: input at 0, output at n*4 of the same region.
    for (const [protocol, client] of [
      ["gRPC", grpc],
      ["REST", rest],
    ]) {
      await attempt(`${protocol}: CudaSharedMemory in and out through the identity model`, async () => {
        const n = 1 << 20;
        const bytes = n * 4;
        const region = await CudaSharedMemory.create(2 * bytes, { device, client });
        try {
          const input = new Uint8Array(floats(n, protocol.length).buffer);
          await region.write(0, input);
          const result = await client.infer(model, {
            inputs: { INPUT0: region.input("FP32", [n], 0, bytes) },
            outputs: [region.output("OUTPUT0", bytes, bytes)],
          });
          const status = await client.cudaSharedMemoryStatus(region.name);
          const output = await region.read(bytes, bytes);
          check(
            `${protocol}: CudaSharedMemory in and out through the identity model`,
            same(output, input) && result.output("OUTPUT0").shape[0] === n,
            `${bytes} bytes, status ${JSON.stringify(status)}`,
          );
        } finally {
          await region.dispose();
        }
        const after = await client.cudaSharedMemoryStatus();
        check(`${protocol}: dispose unregisters`, after.length === 0, JSON.stringify(after));
      });
    }

    // 2. A region made by Python (cudaMalloc + cudaIpcGetMemHandle), registered over HTTP with base64.
    await attempt(
      "Python: cudaIpcGetMemHandle region registered over HTTP, input and output on the device",
      async () => {
        const script = join(out, "python_client.py");
        writeFileSync(script, PYTHON_CLIENT);
        const answer = await runPython(python, [script, base, String(device)], join(out, "python.log"));
        check(
          "Python: cudaIpcGetMemHandle region registered over HTTP, input and output on the device",
          answer.ok === true,
          JSON.stringify(answer),
        );
      },
    );

    // 3. Triton's errors on the real GPU.
    await attempt("errors", async () => {
      const region = await CudaSharedMemory.create(4096, { device });
      const handle = region.rawHandle;
      try {
        await expectError(
          "wrong device id (REST): invalid args",
          rest.registerCudaSharedMemory("bad", handle, device + 64, 4096),
          "failed to register shared memory region: invalid args",
        );
        await expectError(
          "a random handle (gRPC): invalid args",
          grpc.registerCudaSharedMemory(
            "bad",
            new Uint8Array(64).map(() => Math.random() * 256),
            device,
            64,
          ),
          "failed to register shared memory region: invalid args",
        );
        await expectError(
          "byte_size past the allocation: Triton's named invalid args",
          grpc.registerCudaSharedMemory("bad", handle, device, 2 ** 40),
          "failed to register shared memory region 'bad': invalid args",
        );
        await grpc.registerCudaSharedMemory("r", handle, device, 4096);
        await expectError(
          "double registration",
          rest.registerCudaSharedMemory("r", handle, device, 4096),
          "shared memory region 'r' already in manager",
        );
        const status = await (await fetch(`${base}/v2/cudasharedmemory/region/r/status`)).text();
        check("REST status JSON", status === `[{"name":"r","device_id":${device},"byte_size":4096}]`, status);
        const all = await grpc.cudaSharedMemoryStatus();
        check(
          "gRPC status",
          all.length === 1 && all[0].byteSize === 4096 && all[0].deviceId === device,
          JSON.stringify(all),
        );
        const infer = (inOffset, inSize, outOffset, outSize) =>
          rest.infer(model, {
            inputs: {
              INPUT0: {
                datatype: "FP32",
                shape: [inSize / 4],
                sharedMemory: { region: "r", offset: inOffset, byteSize: inSize },
              },
            },
            outputs: [{ name: "OUTPUT0", sharedMemory: { region: "r", offset: outOffset, byteSize: outSize } }],
          });
        await expectError(
          "input offset past the end",
          infer(4096, 16, 0, 16),
          "Invalid offset for shared memory region: 'r'",
        );
        await expectError(
          "input offset + byte size past the end",
          infer(4088, 16, 0, 16),
          "Invalid offset + byte size for shared memory region: 'r'",
        );
        await expectError(
          "output region too small",
          infer(0, 64, 64, 32),
          "should be at least 64 bytes to hold the results",
        );
        await region.write(0, new Uint8Array(floats(16, 3).buffer));
        await infer(0, 64, 2048, 64);
        check(
          "a registered region's input and output at offsets",
          same(await region.read(2048, 64), await region.read(0, 64)),
        );
        await grpc.unregisterCudaSharedMemory("r");
        await expectError("infer after unregister", infer(0, 64, 64, 64), "Unable to find shared memory region: 'r'");
        // Regions left registered are closed at shutdown (checked below by a clean exit).
        await grpc.registerCudaSharedMemory("left", handle, device, 4096);
      } finally {
        await region.dispose();
      }
    });

    // 4. Timing: a large FP32 tensor in and out through CUDA shared memory (one DtoH + one HtoD in the server).
    if (big > 0) {
      await attempt(`${big} bytes in and out`, async () => {
        const region = await CudaSharedMemory.create(2 * big, { device, client: grpc });
        try {
          const input = new Uint8Array(floats(big / 4, 1).buffer);
          await region.write(0, input);
          const request = {
            inputs: { INPUT0: region.input("FP32", [big / 4], 0, big) },
            outputs: [region.output("OUTPUT0", big, big)],
          };
          await grpc.infer(model, request);
          const times = [];
          for (let i = 0; i < 5; i++) {
            const start = performance.now();
            await grpc.infer(model, request);
            times.push(performance.now() - start);
          }
          times.sort((a, b) => a - b);
          const ok = same(await region.read(big, big), input);
          const ms = times[2];
          check(
            `${big} bytes in and out`,
            ok,
            `median ${ms.toFixed(2)} ms end to end (${((2 * big) / ms / 1e6).toFixed(1)} GB/s device<->host in the server)`,
          );
        } finally {
          await region.dispose();
        }
      });
    }
  } finally {
    grpc.close();
    rest.close();
    const code = await new Promise((resolve) => {
      child.once("exit", resolve);
      child.disconnect();
    });
    writeFileSync(serverLog, Buffer.concat(logChunks));
    check("the server shuts down cleanly with a CUDA region still registered", code === 0, `exit ${code}`);
  }

  const failed = results.filter((r) => !r.ok);
  writeFileSync(join(out, "cuda-shm-gpu.json"), `${JSON.stringify({ results }, null, 2)}\n`);
  console.log(
    `\n${results.length - failed.length}/${results.length} passed; results in ${join(out, "cuda-shm-gpu.json")}`,
  );
  process.exit(failed.length === 0 ? 0 : 1);
}

function runPython(python, args, logPath) {
  return new Promise((resolve, reject) => {
    const child = spawn(python, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("exit", (code) => {
      writeFileSync(logPath, `${stdout}\n--- stderr ---\n${stderr}`);
      const last = stdout.trim().split("\n").pop() ?? "";
      try {
        resolve({ exit: code, ...JSON.parse(last) });
      } catch {
        resolve({ ok: false, exit: code, stderr: stderr.slice(-600) });
      }
    });
  });
}

// Plain Python + ctypes on the CUDA runtime (the nvidia wheel's libcudart, which torch loads):
// the memory is its own cudaMalloc, not a sub-allocation of torch's caching allocator, so the
// handle maps exactly these bytes.
const PYTHON_CLIENT = String.raw`
import base64, ctypes, glob, json, os, struct, sys, urllib.request, urllib.error
base, device = sys.argv[1], int(sys.argv[2])
try:
    import torch  # loads the wheel's CUDA runtime
    torch.cuda.init()
except Exception as e:
    print("torch:", e, file=sys.stderr)

def cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    import nvidia
    for root in nvidia.__path__:
        for path in sorted(glob.glob(os.path.join(root, "**", "libcudart.so*"), recursive=True)):
            try:
                return ctypes.CDLL(path)
            except OSError:
                pass
    raise RuntimeError("libcudart not found")

rt = cudart()
def check(status, what):
    if status != 0:
        rt.cudaGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(what + ": " + rt.cudaGetErrorString(status).decode())

def post(path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

n = 4096
size = 2 * n * 4
check(rt.cudaSetDevice(device), "cudaSetDevice")
ptr = ctypes.c_void_p()
check(rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size)), "cudaMalloc")
handle = (ctypes.c_ubyte * 64)()
check(rt.cudaIpcGetMemHandle(ctypes.byref(handle), ptr), "cudaIpcGetMemHandle")
values = [i * 0.5 - 7.0 for i in range(n)]
host = (ctypes.c_float * n)(*values)
check(rt.cudaMemcpy(ptr, host, ctypes.c_size_t(n * 4), 1), "cudaMemcpy H2D")
check(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
raw = base64.b64encode(bytes(handle)).decode()
result = {"handle_bytes": len(bytes(handle))}
result["register"] = post("/v2/cudasharedmemory/region/py/register",
                          {"raw_handle": {"b64": raw}, "device_id": device, "byte_size": size})
result["double"] = post("/v2/cudasharedmemory/region/py/register",
                        {"raw_handle": {"b64": raw}, "device_id": device, "byte_size": size})
infer = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [n],
                     "parameters": {"shared_memory_region": "py", "shared_memory_byte_size": n * 4}}],
         "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "py",
                     "shared_memory_offset": n * 4, "shared_memory_byte_size": n * 4}}]}
result["infer"] = post("/v2/models/identity_fp32/infer", infer)
back = (ctypes.c_float * n)()
check(rt.cudaMemcpy(back, ctypes.c_void_p(ptr.value + n * 4), ctypes.c_size_t(n * 4), 2), "cudaMemcpy D2H")
result["equal"] = list(back) == [struct.unpack("f", struct.pack("f", v))[0] for v in values]
with urllib.request.urlopen(base + "/v2/cudasharedmemory/status") as r:
    result["status"] = r.read().decode()
result["unregister"] = post("/v2/cudasharedmemory/region/py/unregister", {})
check(rt.cudaFree(ptr), "cudaFree")
result["ok"] = (result["register"][0] == 200 and result["double"][0] == 400
                and "already in manager" in result["double"][1] and result["infer"][0] == 200
                and result["equal"] and result["unregister"][0] == 200)
print(json.dumps(result))
`;

if (process.argv[2] === "--serve") {
  // The server process: Galley over the repository in argv[3]; ports sent to the parent.
  const { createServer, createLogger } = await import("@galley/server");
  const server = createServer({
    modelRepositories: [process.argv[3]],
    allowClientShm: true,
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ verboseLevel: 1 }),
  });
  const addresses = await server.listen();
  process.send?.({ http: addresses.http?.port, grpc: addresses.grpc?.port, failed: addresses.failedModels });
  process.on("disconnect", () => void server.close().then(() => process.exit(0)));
} else {
  await main();
}

// A 16 MiB tensor's round trip through an identity model: system shared memory against raw gRPC
// (`raw_input_contents`), the binary HTTP extension and JSON REST, all measured in the same run
// against one Galley server in a child process. The target (issue 7): shared memory ≥ 3× raw gRPC.
//
//   (cd packages/server && npx tsc -p tsconfig.build.json) && (cd packages/client && npx tsc -p tsconfig.build.json)
//   npx tsx bench/shm.ts [--reps=5] [--samples=10] [--json-samples=1] [--mib=16]
import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import {
  createGrpcClient,
  createRestClient,
  type InferenceClient,
  type InferOptions,
  SystemSharedMemory,
  tensor,
} from "@galley/client";
import { formatSpread, median, pairedRatios, spread, table } from "./lib/stats.js";

const arg = (name: string, fallback: number) => {
  const flag = process.argv.find((a) => a.startsWith(`--${name}=`));
  return Number(flag?.split("=")[1] ?? process.env[`BENCH_${name.toUpperCase().replace("-", "_")}`] ?? fallback);
};
const REPS = arg("reps", 5);
const SAMPLES = arg("samples", 10);
const JSON_SAMPLES = arg("json-samples", 1);
const BYTES = arg("mib", 16) * 1024 * 1024;
const ELEMENTS = BYTES / 4;
const GALLEY = new URL("../packages/server/dist/cli/galley.js", import.meta.url).pathname;

// An identity model: a scripted (js) model hands its input back as its output, moved, not copied.
const repo = mkdtempSync(join(tmpdir(), "galley-bench-shm-"));
mkdirSync(join(repo, "identity_fp32", "1"), { recursive: true });
writeFileSync(
  join(repo, "identity_fp32", "config.pbtxt"),
  `name: "identity_fp32"\nbackend: "js"\nmax_batch_size: 0\n` +
    `input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n` +
    `output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n`,
);
writeFileSync(
  join(repo, "identity_fp32", "1", "model.mjs"),
  `export default class { execute(requests) { return requests.map((r) => ({ outputs: [{ ...r.input("INPUT0"), name: "OUTPUT0" }] })); } }\n`,
);

/** `galley serve` in its own process (its own event loop), on free ports; resolves with them. */
function startServer(): Promise<{ child: ChildProcess; grpc: number; http: number }> {
  const child = spawn(
    process.execPath,
    [
      GALLEY,
      "serve",
      "--model-repository",
      repo,
      "--allow-client-shm=true",
      "--http-address",
      "127.0.0.1",
      "--grpc-address",
      "127.0.0.1",
      "--http-port",
      "0",
      "--grpc-port",
      "0",
      "--allow-metrics=false",
      // The JSON body of 16 MiB of random FP32 values is about 80 MB.
      "--http-max-input-size",
      String(1 << 30),
    ],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  return new Promise((resolve, reject) => {
    let log = "";
    const ports: { grpc?: number; http?: number } = {};
    child.once("exit", (code) => reject(new Error(`galley serve exited (${code}):\n${log}`)));
    child.stderr?.on("data", (chunk: Buffer) => {
      log += chunk.toString();
      for (const [, service, port] of log.matchAll(/Started (GRPCInferenceService|HTTPService) at .*:(\d+)/g)) {
        ports[service === "HTTPService" ? "http" : "grpc"] = Number(port);
      }
      if (ports.grpc && ports.http) {
        child.stderr?.removeAllListeners("data");
        child.stderr?.resume();
        child.removeAllListeners("exit");
        resolve({ child, grpc: ports.grpc, http: ports.http });
      }
    });
  });
}

const { child, grpc, http } = await startServer();
const grpcClient = createGrpcClient({ baseUrl: `http://127.0.0.1:${grpc}` });
const binaryClient = createRestClient({ baseUrl: `http://127.0.0.1:${http}` });
const jsonClient = createRestClient({ baseUrl: `http://127.0.0.1:${http}`, binary: false });
const MODEL = "identity_fp32";

// Seeded pseudo-random FP32 values in [0, 1): what a real tensor's bytes (and JSON text) look like.
const input = new Float32Array(ELEMENTS);
let seed = 42;
for (let i = 0; i < ELEMENTS; i++) {
  seed = (seed * 1664525 + 1013904223) >>> 0;
  input[i] = seed / 2 ** 32;
}
const inputBytes = new Uint8Array(input.buffer);

// One region for the input, one for the output, registered once (as an application would).
const inRegion = await SystemSharedMemory.create(BYTES, { client: grpcClient });
const outRegion = await SystemSharedMemory.create(BYTES, { client: grpcClient });
const shmRequest: InferOptions = {
  inputs: { INPUT0: inRegion.input("FP32", [ELEMENTS], 0, BYTES) },
  outputs: [outRegion.output("OUTPUT0", 0, BYTES)],
};

/** One round trip: the input from a buffer of the application's, the output into one. */
type Trip = () => Promise<Uint8Array | undefined>;
const viaClient =
  (client: InferenceClient): Trip =>
  async () =>
    (await client.infer(MODEL, { inputs: { INPUT0: tensor.fp32([ELEMENTS], input) } })).output("OUTPUT0").data;

/**
 * Retries a round trip the client could not send because the server had closed the keep-alive
 * connection under it: a JSON round trip of this size blocks the client's event loop for longer
 * than the server's 5 s keep-alive timeout, so fetch can pick a connection whose FIN it has not
 * processed yet (EPIPE / ECONNRESET). Only successful trips are timed; retries are counted.
 */
let retries = 0;
/** When the current timed attempt began: a resent trip is timed from its resending. */
let attemptStart = 0;
const retried =
  (trip: Trip): Trip =>
  async () => {
    for (let attempt = 0; ; attempt++) {
      try {
        return await trip();
      } catch (error) {
        const code = ((error as Error).cause as { code?: string } | undefined)?.code;
        if (attempt > 2 || (code !== "EPIPE" && code !== "ECONNRESET")) throw error;
        retries++;
        attemptStart = performance.now();
      }
    }
  };

const targets: { name: string; samples: number; warmup: boolean; trip: Trip }[] = [
  {
    name: "system shared memory: write input, infer, read output",
    samples: SAMPLES,
    warmup: true,
    trip: async () => {
      await inRegion.write(0, inputBytes);
      await grpcClient.infer(MODEL, shmRequest);
      return outRegion.read(0, BYTES);
    },
  },
  {
    name: "system shared memory: infer only (tensors already in place)",
    samples: SAMPLES,
    warmup: true,
    trip: async () => {
      await grpcClient.infer(MODEL, shmRequest);
      return undefined;
    },
  },
  { name: "gRPC raw_input_contents (baseline)", samples: SAMPLES, warmup: true, trip: viaClient(grpcClient) },
  { name: "HTTP binary tensor extension", samples: SAMPLES, warmup: true, trip: retried(viaClient(binaryClient)) },
  // Seconds per call: no warm-up beyond the check below.
  { name: "HTTP JSON", samples: JSON_SAMPLES, warmup: false, trip: retried(viaClient(jsonClient)) },
];
const BASELINE = 2;

function same(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b));
}

const loadAtStart = loadavg()[0]?.toFixed(2);
try {
  // Every path must hand the tensor back unchanged before any of them is timed.
  await inRegion.write(0, inputBytes);
  for (const target of targets) {
    const out = await target.trip();
    const check = out ?? (await outRegion.read(0, BYTES));
    if (!same(check, inputBytes)) throw new Error(`${target.name}: the output differs from the input`);
  }

  // Interleaved repetitions: rep 1 of every target, then rep 2, ... (drift spreads over all).
  const medians: number[][] = targets.map(() => []);
  for (let rep = 0; rep < REPS; rep++) {
    for (const [i, target] of targets.entries()) {
      if (target.warmup) await target.trip();
      const times: number[] = [];
      for (let s = 0; s < target.samples; s++) {
        attemptStart = performance.now();
        await target.trip();
        times.push(performance.now() - attemptStart);
      }
      medians[i]?.push(median(times));
    }
    process.stderr.write(`rep ${rep + 1}/${REPS} done\n`);
  }

  const baseline = medians[BASELINE] as number[];
  const mib = BYTES / (1024 * 1024);
  console.log(
    `${mib} MiB FP32 identity round trip; ${REPS} reps (median of ${SAMPLES} calls each, JSON ${JSON_SAMPLES}); ` +
      `${availableParallelism()} cores, load average ${loadAtStart} at the start, ${loadavg()[0]?.toFixed(2)} at the end`,
  );
  console.log(
    table(
      ["path", "ms per round trip", "tensor MiB/s", "speed-up vs raw gRPC"],
      targets.map((target, i) => {
        const ms = medians[i] as number[];
        return [
          target.name,
          formatSpread(spread(ms), 1),
          (mib / (median(ms) / 1000)).toFixed(0),
          formatSpread(spread(pairedRatios(baseline, ms)), 2),
        ];
      }),
    ),
  );
  if (retries > 0)
    console.log(`(${retries} HTTP round trip(s) resent after the server closed an idle keep-alive connection)`);
  const shm = median(pairedRatios(baseline, medians[0] as number[]));
  console.log(
    `\nshared memory (write, infer, read) / raw gRPC: ${shm.toFixed(2)}× (target ≥ 3): ${shm >= 3 ? "PASS" : "MISS"}`,
  );
} finally {
  await Promise.all([inRegion.dispose(), outRegion.dispose()]);
  child.kill("SIGTERM");
  rmSync(repo, { recursive: true, force: true });
}

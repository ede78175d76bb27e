// A load generator for gRPC ModelInfer that costs the server's side as little as possible to
// measure: plain node:http2 sessions, the request encoded once (tensor bytes written as their own
// chunks after the encoded head, as perf_analyzer sends pre-built requests), the response checked
// for grpc-status and counted, not decoded. Callers run in load processes (the calling script
// forked again), each with its own connection, so one client event loop is not the bottleneck.
import { fork } from "node:child_process";
import { connect } from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { CudaSharedMemory, createGrpcClient, type SharedRegion, SystemSharedMemory } from "@galley/client";
import { type InferParameter, ModelInferRequestSchema, toInferParameter } from "@galley/proto";

/** One ModelInfer request, as raw tensors. */
export interface LoadRequest {
  model: string;
  inputs: { name: string; datatype: string; shape: number[]; data: Uint8Array }[];
  /** The outputs and their sizes: needed to place them in shared memory (`--shared-memory`). */
  outputs?: { name: string; byteSize: number }[];
}

/**
 * Where the tensors travel: in the gRPC messages (`none`), or in a region of the caller's own
 * (system shared memory, or CUDA memory on GPU 0) that each request names, as perf_analyzer's
 * `--shared-memory=system|cuda` does; the input is written into it once.
 */
export type LoadSharedMemory = "none" | "system" | "cuda";

/** What a load run measured. */
export interface LoadResult {
  calls: number;
  seconds: number;
  /** Per-call latencies, milliseconds. */
  latencies: number[];
  /** Calls that failed, with the first failure's text. */
  failures: number;
  firstFailure?: string;
}

interface WorkerJob {
  url: string;
  request: LoadRequest;
  sharedMemory: LoadSharedMemory;
  callers: number;
  warmMs: number;
  seconds: number;
}

/** Flow-control settings as large as the server's, so big tensors are not held to 64 KiB windows. */
const SESSION = { settings: { initialWindowSize: 16 << 20, maxFrameSize: (1 << 24) - 1 }, maxSessionMemory: 4096 };
/** `raw_input_contents` is field 7 of ModelInferRequest, length-delimited: (7 << 3) | 2. */
const RAW_INPUT_TAG = 0x3a;
/** Set in a load process's environment. */
const WORKER_ENV = "GALLEY_GRPC_LOAD_PROCESS";

/**
 * `concurrency` callers calling back to back for `seconds` after `warmMs`, spread over up to
 * `threads` load processes (each its own HTTP/2 connection).
 */
export async function runLoad(
  url: string,
  request: LoadRequest,
  options: {
    concurrency: number;
    threads: number;
    seconds: number;
    warmMs: number;
    script: string;
    sharedMemory?: LoadSharedMemory;
  },
): Promise<LoadResult> {
  const threads = Math.max(1, Math.min(options.threads, options.concurrency));
  const jobs = Array.from({ length: threads }, (_, i) => {
    const callers = Math.floor(options.concurrency / threads) + (i < options.concurrency % threads ? 1 : 0);
    const job: WorkerJob = {
      url,
      request,
      sharedMemory: options.sharedMemory ?? "none",
      callers,
      warmMs: options.warmMs,
      seconds: options.seconds,
    };
    return new Promise<LoadResult>((resolve, reject) => {
      const child = fork(options.script, [], {
        execArgv: process.execArgv,
        env: { ...process.env, [WORKER_ENV]: "1" },
        serialization: "advanced",
      });
      child.once("message", (result: LoadResult) => resolve(result));
      child.once("error", reject);
      child.once("exit", (code) => reject(new Error(`load process exited (${code})`)));
      child.send(job);
    });
  });
  const results = await Promise.all(jobs);
  return {
    calls: results.reduce((a, r) => a + r.calls, 0),
    seconds: Math.max(...results.map((r) => r.seconds)),
    latencies: results.flatMap((r) => r.latencies),
    failures: results.reduce((a, r) => a + r.failures, 0),
    ...(results.find((r) => r.firstFailure) ? { firstFailure: results.find((r) => r.firstFailure)?.firstFailure } : {}),
  };
}

/** True (and the load done) when this process is a load process started by {@link runLoad}. */
export async function runLoadWorker(): Promise<boolean> {
  if (process.env[WORKER_ENV] !== "1") return false;
  const job = await new Promise<WorkerJob>((resolve) => process.once("message", (m) => resolve(m as WorkerJob)));
  process.send?.(await work(job));
  process.disconnect?.();
  return true;
}

async function work(job: WorkerJob): Promise<LoadResult> {
  const session = connect(job.url, SESSION);
  await new Promise<void>((resolve, reject) => {
    session.once("connect", () => resolve());
    session.once("error", reject);
  });
  session.setLocalWindowSize(128 << 20);
  const shared = await placeInShared(job);
  const raw = shared.messages.length === 0 ? encode(job.request) : undefined;
  const call = (caller: number) =>
    new Promise<void>((resolve, reject) => {
      const stream = session.request({
        ":method": "POST",
        ":path": "/inference.GRPCInferenceService/ModelInfer",
        "content-type": "application/grpc",
        te: "trailers",
      });
      let status: string | undefined;
      let message = "";
      stream.on("response", (headers) => {
        if (headers["grpc-status"] !== undefined) {
          status = String(headers["grpc-status"]);
          message = String(headers["grpc-message"] ?? "");
        }
      });
      stream.on("trailers", (trailers) => {
        status = String(trailers["grpc-status"]);
        message = String(trailers["grpc-message"] ?? "");
      });
      stream.on("data", () => undefined);
      stream.on("error", reject);
      stream.on("close", () =>
        status === "0"
          ? resolve()
          : reject(new Error(`grpc-status ${status ?? "none"}: ${decodeURIComponent(message)}`)),
      );
      const pieces = raw ?? [shared.messages[caller] as Uint8Array];
      for (const piece of pieces.slice(0, -1)) stream.write(piece);
      stream.end(pieces[pieces.length - 1]);
    });
  const result: LoadResult = { calls: 0, seconds: 0, latencies: [], failures: 0 };
  const warmEnd = performance.now() + job.warmMs;
  const loop = async (caller: number, until: number, record: boolean) => {
    while (performance.now() < until) {
      const t = performance.now();
      try {
        await call(caller);
        if (record) {
          result.latencies.push(performance.now() - t);
          result.calls++;
        }
      } catch (error) {
        result.failures++;
        result.firstFailure ??= (error as Error).message;
        if (result.failures > 100) return;
      }
    }
  };
  await Promise.all(Array.from({ length: job.callers }, (_, i) => loop(i, warmEnd, false)));
  const start = performance.now();
  await Promise.all(Array.from({ length: job.callers }, (_, i) => loop(i, start + job.seconds * 1000, true)));
  result.seconds = (performance.now() - start) / 1000;
  session.close();
  await shared.dispose();
  return result;
}

/** Per caller, a region holding its input (written once) and room for its outputs, and the request naming them. */
async function placeInShared(job: WorkerJob): Promise<{ messages: Uint8Array[]; dispose(): Promise<void> }> {
  if (job.sharedMemory === "none") return { messages: [], dispose: async () => {} };
  const client = createGrpcClient({ baseUrl: job.url });
  const inputBytes = job.request.inputs.reduce((n, i) => n + i.data.byteLength, 0);
  const outputs = job.request.outputs ?? [];
  const total = inputBytes + outputs.reduce((n, o) => n + o.byteSize, 0);
  const regions: SharedRegion[] = [];
  const messages: Uint8Array[] = [];
  const param = (region: string, offset: number, byteSize: number): Record<string, InferParameter> => ({
    shared_memory_region: toInferParameter(region),
    shared_memory_offset: toInferParameter(offset),
    shared_memory_byte_size: toInferParameter(byteSize),
  });
  for (let caller = 0; caller < job.callers; caller++) {
    const region =
      job.sharedMemory === "cuda"
        ? await CudaSharedMemory.create(total, { device: 0, client })
        : await SystemSharedMemory.create(total, { client });
    regions.push(region);
    let at = 0;
    const inputs = [];
    for (const input of job.request.inputs) {
      await region.write(at, input.data);
      inputs.push({
        name: input.name,
        datatype: input.datatype,
        shape: input.shape.map(BigInt),
        parameters: param(region.name, at, input.data.byteLength),
      });
      at += input.data.byteLength;
    }
    const requested = outputs.map((output) => {
      const entry = { name: output.name, parameters: param(region.name, at, output.byteSize) };
      at += output.byteSize;
      return entry;
    });
    const body = toBinary(
      ModelInferRequestSchema,
      create(ModelInferRequestSchema, { modelName: job.request.model, inputs, outputs: requested }),
    );
    const frame = new Uint8Array(5 + body.byteLength);
    new DataView(frame.buffer).setUint32(1, body.byteLength);
    frame.set(body, 5);
    messages.push(frame);
  }
  return {
    messages,
    dispose: async () => {
      for (const region of regions) await (region as unknown as AsyncDisposable)[Symbol.asyncDispose]();
    },
  };
}

/** The gRPC frame: its 5-byte prefix, the encoded head, then each raw tensor as tag, length, bytes. */
function encode(request: LoadRequest): Uint8Array[] {
  const head = toBinary(
    ModelInferRequestSchema,
    create(ModelInferRequestSchema, {
      modelName: request.model,
      inputs: request.inputs.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape.map(BigInt) })),
    }),
  );
  const pieces: Uint8Array[] = [head];
  let length = head.byteLength;
  for (const input of request.inputs) {
    const prefix = [RAW_INPUT_TAG];
    for (let n = input.data.byteLength; ; n = Math.floor(n / 128)) {
      if (n <= 0x7f) {
        prefix.push(n);
        break;
      }
      prefix.push((n & 0x7f) | 0x80);
    }
    pieces.push(Uint8Array.from(prefix), input.data);
    length += prefix.length + input.data.byteLength;
  }
  const frame = Buffer.alloc(5);
  frame.writeUInt32BE(length, 1);
  return [frame, ...pieces];
}

// Child entry for server-cpu.ts: one server process in one variant (argv[2]), serving `simple`,
// which reports its ports and pid (the parent reads its CPU time from /proc/<pid>/stat). Variants
// change the running server from the outside, by replacing one method on a live object, so that
// the server's code stays as it ships:
//
// - `hand-written`: servers/hand-written.ts (node:http + one session.run per request), the baseline;
// - `galley`: Galley as `galley serve` runs it (servers/galley.ts);
// - `galley-canned-core`: Galley whose `core.infer` answers a precomputed response (the frontends
//   alone: HTTP parsing, JSON or binary decoding and encoding, the socket);
// - `galley-canned-scheduler`: Galley whose model's `scheduler.enqueue` answers at once with
//   outputs computed in place (the core alone: lookup, validation, statistics, the response);
// - `galley-inline-backend`: Galley whose model instances' `execute` computes the outputs on the
//   event loop (core and scheduler, without the backend's thread hop and without ONNX Runtime);
// - `ort`: no server; an onnxruntime-node session as Galley configures it (`intraOpNumThreads` 1),
//   for the model's own cost.
//
// The Galley variants and `ort` also answer an `inproc` job: `requests` calls at `concurrency`
// made inside this process (core.infer, or session.run), so the load generator and its sockets
// are out of the picture.

import { createLogger, createServer, type GalleyServer } from "@galley/server";
import ort from "onnxruntime-node";
import { startHandWritten } from "../servers/hand-written.js";
import { serveJobs } from "./ipc.js";
import { INPUT0, INPUT1, MODEL, MODEL_FILE, REPOSITORY, SHAPE } from "./simple.js";
import { workloadOf } from "./workload.js";

export type CpuVariant =
  | "hand-written"
  | "galley"
  | "galley-canned-core"
  | "galley-canned-scheduler"
  | "galley-inline-backend"
  | "ort";

export type CpuVariantJob = { type: "inproc"; concurrency: number; requests: number };

const variant = process.argv[2] as CpuVariant;
const bytes = (values: Int32Array) => new Uint8Array(values.buffer, values.byteOffset, values.byteLength);

/** `simple`'s outputs for two INT32 inputs, computed here: OUTPUT0 = sum, OUTPUT1 = difference. */
function simpleOutputs(input0: Uint8Array, input1: Uint8Array) {
  const a = new Int32Array(input0.slice().buffer);
  const b = new Int32Array(input1.slice().buffer);
  const sum = a.map((v, i) => v + (b[i] as number));
  const difference = a.map((v, i) => v - (b[i] as number));
  return [
    { name: "OUTPUT0", datatype: "INT32" as const, shape: [...SHAPE], data: bytes(sum), parameters: {} },
    { name: "OUTPUT1", datatype: "INT32" as const, shape: [...SHAPE], data: bytes(difference), parameters: {} },
  ];
}

type Tensors = ReturnType<typeof simpleOutputs>;

/** A started variant: its ports, the in-process job where it has one, how to stop it. */
interface Started {
  ports: object;
  inproc?: (concurrency: number, requests: number) => Promise<void>;
  close(): Promise<void>;
}
const inputOf = (inputs: { name: string; data: Uint8Array }[], name: string) =>
  inputs.find((i) => i.name === name)?.data ?? new Uint8Array(64);

async function startGalleyVariant(): Promise<Started> {
  const server: GalleyServer = createServer({
    modelRepositories: [REPOSITORY],
    controlMode: "explicit",
    loadModels: [MODEL],
    http: { host: "127.0.0.1", port: 0 },
    grpc: { host: "127.0.0.1", port: 0 },
    metrics: false,
    log: createLogger({ info: false }),
  });
  const { http, grpc, failedModels } = await server.listen();
  if (failedModels.length > 0) throw new Error(`galley failed to load ${failedModels.join(", ")}`);
  const model = server.core.models.resolve(MODEL, "");
  if (variant === "galley-canned-core") {
    const outputs = simpleOutputs(bytes(INPUT0), bytes(INPUT1));
    const core = server.core as { infer: unknown };
    core.infer = async (request: { modelName: string; id: string }) => ({
      modelName: request.modelName,
      modelVersion: "1",
      id: request.id,
      parameters: {},
      outputs,
    });
  } else if (variant === "galley-canned-scheduler") {
    const scheduler = model.scheduler as { enqueue: unknown };
    scheduler.enqueue = async (request: { inputs: Tensors }) => ({
      outputs: simpleOutputs(inputOf(request.inputs, "INPUT0"), inputOf(request.inputs, "INPUT1")),
      queueNs: 0n,
    });
  } else if (variant === "galley-inline-backend") {
    if (model.backend.instances.length === 0) throw new Error("simple has no instances to replace");
    for (const instance of model.backend.instances) {
      (instance as { execute: unknown }).execute = async (requests: readonly { inputs: Tensors }[]) => ({
        responses: requests.map((r) => simpleOutputs(inputOf(r.inputs, "INPUT0"), inputOf(r.inputs, "INPUT1"))),
        computeInputNs: 0n,
        computeInferNs: 0n,
        computeOutputNs: 0n,
      });
    }
  } else if (variant !== "galley") {
    throw new Error(`unknown variant '${variant}'`);
  }
  const inputs = [
    { name: "INPUT0", datatype: "INT32" as const, shape: SHAPE, data: bytes(INPUT0), parameters: {} },
    { name: "INPUT1", datatype: "INT32" as const, shape: SHAPE, data: bytes(INPUT1), parameters: {} },
  ];
  const call = () =>
    server.core.infer({ modelName: MODEL, modelVersion: "", id: "", parameters: {}, inputs, outputs: [] });
  return {
    ports: { http: http?.port, grpc: grpc?.port },
    inproc: (concurrency, requests) => closedLoop(concurrency, requests, call),
    close: () => server.close(),
  };
}

async function startOrt(): Promise<Started> {
  const session = await ort.InferenceSession.create(MODEL_FILE, { intraOpNumThreads: 1 });
  const feeds = {
    INPUT0: new ort.Tensor("int32", INPUT0, SHAPE),
    INPUT1: new ort.Tensor("int32", INPUT1, SHAPE),
  };
  return {
    ports: {},
    inproc: (concurrency: number, requests: number) => closedLoop(concurrency, requests, () => session.run(feeds)),
    close: () => session.release(),
  };
}

/** `requests` calls, `concurrency` at a time, back to back. */
async function closedLoop(concurrency: number, requests: number, call: () => Promise<unknown>): Promise<void> {
  let issued = 0;
  const worker = async () => {
    while (issued < requests) {
      issued++;
      await call();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

const started: Started =
  variant === "hand-written"
    ? await startHandWritten([workloadOf()])
    : variant === "ort"
      ? await startOrt()
      : await startGalleyVariant();

serveJobs(
  { ...started.ports, pid: process.pid },
  async (job: CpuVariantJob) => {
    if (job.type !== "inproc" || !started.inproc) throw new Error(`${variant} runs no ${job.type} job`);
    const begin = performance.now();
    await started.inproc(job.concurrency, job.requests);
    return performance.now() - begin;
  },
  started.close,
);

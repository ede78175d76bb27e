// One inference call per protocol, as a lean client would make it. Each caller decodes the output
// tensors (a real client has to), so every target pays the same client-side cost. A target names its
// model's workload (`simple` by default, or the FP32 identity): the inputs sent and outputs expected.
import { Agent, request } from "node:http";
import { connect } from "node:http2";
import { Worker } from "node:worker_threads";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService, ModelInferRequestSchema, ModelInferResponseSchema } from "@galley/proto";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import ort from "onnxruntime-node";
import { INPUT0, INPUT1 } from "./simple.js";
import {
  binaryBody,
  bytesOf,
  type Datatype,
  jsonBody,
  type ModelSpec,
  valuesOf,
  type Workload,
  workloadOf,
} from "./workload.js";

/**
 * What a benchmark talks to: a server over the network, or an in-process baseline; `workload` says
 * which model (absent: `simple`; the worker echo always posts `simple`'s inputs).
 */
export type Target = (
  | { kind: "grpc" | "grpc-raw" | "http-binary" | "http-json"; port: number }
  | { kind: "ort"; intraOpNumThreads?: number }
  | { kind: "core" }
  | { kind: "worker-echo" }
) & { workload?: ModelSpec };

/** The workload's outputs of one call, in its order (`simple`: OUTPUT0 and OUTPUT1). */
export type Outputs = ArrayLike<number>[];

export interface Caller {
  infer(): Promise<Outputs>;
  close(): Promise<void>;
}

export async function createCaller(target: Target, concurrency = 1): Promise<Caller> {
  const workload = workloadOf(target.workload);
  switch (target.kind) {
    case "grpc":
      return grpcCaller(workload, target.port);
    case "grpc-raw":
      return rawGrpcCaller(workload, target.port);
    case "http-binary":
      return httpBinaryCaller(workload, target.port, concurrency);
    case "http-json":
      return httpJsonCaller(workload, target.port, concurrency);
    case "ort":
      return ortCaller(workload, target.intraOpNumThreads);
    case "core":
      return coreCaller(workload);
    case "worker-echo":
      return workerEchoCaller();
  }
}

const inferRequest = (workload: Workload) =>
  create(ModelInferRequestSchema, {
    modelName: workload.model,
    inputs: workload.inputs.map(({ name, datatype, shape }) => ({ name, datatype, shape: shape.map(BigInt) })),
    rawInputContents: workload.inputs.map(({ values }) => bytesOf(values)),
  });

/** The workload's outputs from a ModelInfer reply: raw_output_contents[i] belongs to outputs[i]. */
function rawOutputs(workload: Workload, reply: { outputs: { name: string }[]; rawOutputContents: Uint8Array[] }) {
  return workload.outputs.map(({ name, datatype }) => {
    const bytes = reply.rawOutputContents[reply.outputs.findIndex((o) => o.name === name)];
    if (!bytes) throw new Error(`gRPC reply without raw ${name}`);
    return valuesOf(datatype, bytes);
  });
}

/** ModelInfer with a Connect client over one HTTP/2 connection; concurrent calls share it. */
function grpcCaller(workload: Workload, port: number): Caller {
  const client = createClient(
    GRPCInferenceService,
    createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}`, acceptCompression: [] }),
  );
  const message = inferRequest(workload);
  return {
    infer: async () => rawOutputs(workload, await client.modelInfer(message)),
    close: async () => {},
  };
}

/**
 * The same RPC from a minimal gRPC client on node:http2 (one length-prefixed message each way),
 * to tell the Connect client's own cost apart from the server's.
 */
function rawGrpcCaller(workload: Workload, port: number): Caller {
  const session = connect(`http://127.0.0.1:${port}`);
  const message = toBinary(ModelInferRequestSchema, inferRequest(workload));
  const frame = Buffer.alloc(5 + message.byteLength);
  frame.writeUInt32BE(message.byteLength, 1);
  frame.set(message, 5);
  const headers = {
    ":method": "POST",
    ":path": "/inference.GRPCInferenceService/ModelInfer",
    "content-type": "application/grpc",
    te: "trailers",
  };
  return {
    infer: () =>
      new Promise<Outputs>((resolve, reject) => {
        const stream = session.request(headers);
        const chunks: Buffer[] = [];
        let status: string | undefined;
        stream.on("response", (h) => {
          status = h["grpc-status"] as string | undefined;
        });
        stream.on("trailers", (h) => {
          status = h["grpc-status"] as string | undefined;
        });
        stream.on("data", (chunk: Buffer) => chunks.push(chunk));
        stream.on("error", reject);
        stream.on("end", () => {
          if (status !== "0") return reject(new Error(`grpc-status ${status}`));
          const body = Buffer.concat(chunks);
          try {
            resolve(rawOutputs(workload, fromBinary(ModelInferResponseSchema, body.subarray(5))));
          } catch (error) {
            reject(error);
          }
        });
        stream.end(frame);
      }),
    close: async () => {
      session.close();
    },
  };
}

/** A keep-alive POST; resolves with the status, headers and whole body. */
function post(agent: Agent, port: number, path: string, headers: Record<string, string | number>, body: Buffer) {
  return new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>((resolve, reject) => {
    const req = request({ agent, host: "127.0.0.1", port, method: "POST", path, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

function httpError(status: number, body: Buffer): Error {
  return new Error(`HTTP ${status}: ${body.toString("utf8", 0, Math.min(body.byteLength, 300))}`);
}

/** Binary tensor extension: JSON header + blobs both ways (PROTOCOL.md §1.5). */
function httpBinaryCaller(workload: Workload, port: number, concurrency: number): Caller {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const { body, headerLength } = binaryBody(workload);
  const datatypes = new Map<string, Datatype>(workload.outputs.map((o) => [o.name, o.datatype]));
  const headers = {
    "content-type": "application/octet-stream",
    "content-length": body.byteLength,
    "inference-header-content-length": headerLength,
  };
  return {
    async infer() {
      const res = await post(agent, port, workload.path, headers, body);
      if (res.status !== 200) throw httpError(res.status, res.body);
      const jsonLength = Number(res.headers["inference-header-content-length"]);
      if (!Number.isInteger(jsonLength)) throw new Error("reply without Inference-Header-Content-Length");
      const header = JSON.parse(res.body.toString("utf8", 0, jsonLength)) as {
        outputs: { name: string; parameters?: { binary_data_size?: number } }[];
      };
      const tensors: Record<string, ArrayLike<number>> = {};
      let at = jsonLength;
      for (const output of header.outputs) {
        const size = output.parameters?.binary_data_size ?? 0;
        tensors[output.name] = valuesOf(datatypes.get(output.name) ?? "INT32", res.body.subarray(at, at + size));
        at += size;
      }
      return outputsOf(workload, tensors);
    },
    close: async () => agent.destroy(),
  };
}

/** Plain KServe v2 JSON both ways. */
function httpJsonCaller(workload: Workload, port: number, concurrency: number): Caller {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const body = jsonBody(workload);
  const headers = { "content-type": "application/json", "content-length": body.byteLength };
  return {
    async infer() {
      const res = await post(agent, port, workload.path, headers, body);
      if (res.status !== 200) throw httpError(res.status, res.body);
      const reply = JSON.parse(res.body.toString("utf8")) as { outputs: { name: string; data: number[] }[] };
      return outputsOf(workload, Object.fromEntries(reply.outputs.map((o) => [o.name, o.data])));
    },
    close: async () => agent.destroy(),
  };
}

/** The workload's outputs, in its order, from a reply's tensors by name. */
function outputsOf(workload: Workload, tensors: Record<string, ArrayLike<number>>): Outputs {
  return workload.outputs.map(({ name }) => {
    const tensor = tensors[name];
    if (!tensor) throw new Error(`reply lacks ${name}: ${Object.keys(tensors).join(", ")}`);
    return tensor;
  });
}

/** The baseline: onnxruntime-node's session.run in this process, no server at all. */
async function ortCaller(workload: Workload, intraOpNumThreads?: number): Promise<Caller> {
  const options = intraOpNumThreads === undefined ? {} : { intraOpNumThreads };
  const session = await ort.InferenceSession.create(workload.modelFile, options);
  const feeds = () =>
    Object.fromEntries(
      workload.inputs.map(({ name, datatype, shape, values }) => [
        name,
        datatype === "FP32"
          ? new ort.Tensor("float32", values as Float32Array, shape)
          : new ort.Tensor("int32", values as Int32Array, shape),
      ]),
    );
  return {
    async infer() {
      const results = await session.run(feeds());
      return workload.outputs.map(({ name }) => results[name]?.data as Int32Array | Float32Array);
    },
    close: () => session.release(),
  };
}

/** Galley's core without any frontend: validation, scheduling and the worker-thread hop. */
async function coreCaller(workload: Workload): Promise<Caller> {
  const server: GalleyServer = createServer({
    modelRepositories: [workload.repository],
    controlMode: "explicit",
    loadModels: [workload.model],
    http: false,
    grpc: false,
    metrics: false,
    log: createLogger({ info: false }),
  });
  await server.listen();
  const inputs = workload.inputs.map(({ name, datatype, shape, values }) => ({
    name,
    datatype,
    shape,
    data: bytesOf(values),
    parameters: {},
  }));
  return {
    async infer() {
      const response = await server.core.infer({
        modelName: workload.model,
        modelVersion: "",
        id: "",
        parameters: {},
        inputs,
        outputs: [],
      });
      return workload.outputs.map(({ name, datatype }) => {
        const tensor = response.outputs.find((o) => o.name === name);
        if (!tensor) throw new Error(`core returned no ${name}`);
        return valuesOf(datatype, tensor.data);
      });
    },
    close: () => server.close(),
  };
}

/** The floor of a worker-thread hop: post both inputs to a worker that posts them straight back. */
function workerEchoCaller(): Caller {
  const worker = new Worker(
    `require("node:worker_threads").parentPort.on("message", (m) => require("node:worker_threads").parentPort.postMessage(m));`,
    { eval: true },
  );
  let pending: ((value: Outputs) => void) | undefined;
  worker.on("message", (m: { a: Int32Array; b: Int32Array }) => pending?.([m.a, m.b]));
  return {
    infer: () =>
      new Promise<Outputs>((resolve) => {
        pending = resolve;
        worker.postMessage({ a: INPUT0, b: INPUT1 });
      }),
    close: async () => {
      await worker.terminate();
    },
  };
}

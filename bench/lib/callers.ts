// One inference call per protocol, as a lean client would make it. Each caller decodes the two
// output tensors (a real client has to), so every target pays the same client-side cost.
import { Agent, request } from "node:http";
import { connect } from "node:http2";
import { Worker } from "node:worker_threads";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { GRPCInferenceService, ModelInferRequestSchema, ModelInferResponseSchema } from "@galley/proto";
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import ort from "onnxruntime-node";
import {
  binaryBody,
  bytesOf,
  INFER_PATH,
  INPUT0,
  INPUT1,
  int32s,
  jsonBody,
  MODEL,
  MODEL_FILE,
  REPOSITORY,
  SHAPE,
} from "./simple.js";

/** What a benchmark talks to: a server over the network, or an in-process baseline. */
export type Target =
  | { kind: "grpc" | "grpc-raw" | "http-binary" | "http-json"; port: number }
  | { kind: "ort"; intraOpNumThreads?: number }
  | { kind: "core" }
  | { kind: "worker-echo" };

/** OUTPUT0 and OUTPUT1 of one call. */
export type Outputs = [ArrayLike<number>, ArrayLike<number>];

export interface Caller {
  infer(): Promise<Outputs>;
  close(): Promise<void>;
}

export async function createCaller(target: Target, concurrency = 1): Promise<Caller> {
  switch (target.kind) {
    case "grpc":
      return grpcCaller(target.port);
    case "grpc-raw":
      return rawGrpcCaller(target.port);
    case "http-binary":
      return httpBinaryCaller(target.port, concurrency);
    case "http-json":
      return httpJsonCaller(target.port, concurrency);
    case "ort":
      return ortCaller(target.intraOpNumThreads);
    case "core":
      return coreCaller();
    case "worker-echo":
      return workerEchoCaller();
  }
}

const inferRequest = () =>
  create(ModelInferRequestSchema, {
    modelName: MODEL,
    inputs: ["INPUT0", "INPUT1"].map((name) => ({ name, datatype: "INT32", shape: SHAPE.map(BigInt) })),
    rawInputContents: [bytesOf(INPUT0), bytesOf(INPUT1)],
  });

function rawOutputs(contents: Uint8Array[]): Outputs {
  const [sum, difference] = contents;
  if (!sum || !difference) throw new Error("gRPC reply without two raw outputs");
  return [int32s(sum), int32s(difference)];
}

/** ModelInfer with a Connect client over one HTTP/2 connection; concurrent calls share it. */
function grpcCaller(port: number): Caller {
  const client = createClient(
    GRPCInferenceService,
    createGrpcTransport({ baseUrl: `http://127.0.0.1:${port}`, acceptCompression: [] }),
  );
  const message = inferRequest();
  return {
    infer: async () => rawOutputs((await client.modelInfer(message)).rawOutputContents),
    close: async () => {},
  };
}

/**
 * The same RPC from a minimal gRPC client on node:http2 (one length-prefixed message each way),
 * to tell the Connect client's own cost apart from the server's.
 */
function rawGrpcCaller(port: number): Caller {
  const session = connect(`http://127.0.0.1:${port}`);
  const message = toBinary(ModelInferRequestSchema, inferRequest());
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
            resolve(rawOutputs(fromBinary(ModelInferResponseSchema, body.subarray(5)).rawOutputContents));
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
function post(agent: Agent, port: number, headers: Record<string, string | number>, body: Buffer) {
  return new Promise<{ status: number; headers: Record<string, unknown>; body: Buffer }>((resolve, reject) => {
    const req = request({ agent, host: "127.0.0.1", port, method: "POST", path: INFER_PATH, headers }, (res) => {
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
function httpBinaryCaller(port: number, concurrency: number): Caller {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const { body, headerLength } = binaryBody();
  const headers = {
    "content-type": "application/octet-stream",
    "content-length": body.byteLength,
    "inference-header-content-length": headerLength,
  };
  return {
    async infer() {
      const res = await post(agent, port, headers, body);
      if (res.status !== 200) throw httpError(res.status, res.body);
      const jsonLength = Number(res.headers["inference-header-content-length"]);
      if (!Number.isInteger(jsonLength)) throw new Error("reply without Inference-Header-Content-Length");
      const header = JSON.parse(res.body.toString("utf8", 0, jsonLength)) as {
        outputs: { name: string; parameters?: { binary_data_size?: number } }[];
      };
      const tensors: Record<string, Int32Array> = {};
      let at = jsonLength;
      for (const output of header.outputs) {
        const size = output.parameters?.binary_data_size ?? 0;
        tensors[output.name] = int32s(res.body.subarray(at, at + size));
        at += size;
      }
      return outputsOf(tensors);
    },
    close: async () => agent.destroy(),
  };
}

/** Plain KServe v2 JSON both ways. */
function httpJsonCaller(port: number, concurrency: number): Caller {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const body = jsonBody();
  const headers = { "content-type": "application/json", "content-length": body.byteLength };
  return {
    async infer() {
      const res = await post(agent, port, headers, body);
      if (res.status !== 200) throw httpError(res.status, res.body);
      const reply = JSON.parse(res.body.toString("utf8")) as { outputs: { name: string; data: number[] }[] };
      return outputsOf(Object.fromEntries(reply.outputs.map((o) => [o.name, o.data])));
    },
    close: async () => agent.destroy(),
  };
}

function outputsOf(tensors: Record<string, ArrayLike<number>>): Outputs {
  const sum = tensors.OUTPUT0;
  const difference = tensors.OUTPUT1;
  if (!sum || !difference) throw new Error(`reply lacks OUTPUT0/OUTPUT1: ${Object.keys(tensors).join(", ")}`);
  return [sum, difference];
}

/** The baseline: onnxruntime-node's session.run in this process, no server at all. */
async function ortCaller(intraOpNumThreads?: number): Promise<Caller> {
  const options = intraOpNumThreads === undefined ? {} : { intraOpNumThreads };
  const session = await ort.InferenceSession.create(MODEL_FILE, options);
  return {
    async infer() {
      const results = await session.run({
        INPUT0: new ort.Tensor("int32", INPUT0, SHAPE),
        INPUT1: new ort.Tensor("int32", INPUT1, SHAPE),
      });
      return [results.OUTPUT0?.data as Int32Array, results.OUTPUT1?.data as Int32Array];
    },
    close: () => session.release(),
  };
}

/** Galley's core without any frontend: validation, scheduling and the worker-thread hop. */
async function coreCaller(): Promise<Caller> {
  const server: GalleyServer = createServer({
    modelRepositories: [REPOSITORY],
    controlMode: "explicit",
    loadModels: [MODEL],
    http: false,
    grpc: false,
    metrics: false,
    log: createLogger({ info: false }),
  });
  await server.listen();
  const tensor = (name: string, values: Int32Array) => ({
    name,
    datatype: "INT32" as const,
    shape: SHAPE,
    data: bytesOf(values),
    parameters: {},
  });
  const inputs = [tensor("INPUT0", INPUT0), tensor("INPUT1", INPUT1)];
  return {
    async infer() {
      const response = await server.core.infer({
        modelName: MODEL,
        modelVersion: "",
        id: "",
        parameters: {},
        inputs,
        outputs: [],
      });
      const [sum, difference] = response.outputs;
      if (!sum || !difference) throw new Error("core returned fewer than two outputs");
      return [int32s(sum.data), int32s(difference.data)];
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

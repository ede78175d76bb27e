// Compatibility with an independent gRPC stack: @grpc/grpc-js with @grpc/proto-loader reading our
// .proto files from /proto (no Connect, no protobuf-es on the client side). What a grpc-js client
// generated from Triton's protos sees must be what Triton answers (PROTOCOL.md §2).
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { cleanup, int32Bytes, range, readInt32, startServer } from "./support/harness.js";

const PROTO_ROOT = fileURLToPath(new URL("../../../proto", import.meta.url));

interface Tensor {
  name: string;
  datatype: string;
  shape: string[];
}

interface InferResponse {
  model_name: string;
  model_version: string;
  id: string;
  outputs: Tensor[];
  raw_output_contents: Buffer[];
}

interface StreamResponse {
  error_message: string;
  infer_response: InferResponse | null;
}

type Callback = (error: grpc.ServiceError | null, response?: unknown) => void;
type UnaryMethod = (request: object, metadata: grpc.Metadata, callback: Callback) => grpc.ClientUnaryCall;

let Inference: grpc.ServiceClientConstructor;
let Health: grpc.ServiceClientConstructor;
const clients: grpc.Client[] = [];

beforeAll(() => {
  const definition = protoLoader.loadSync(["inference/grpc_service.proto", "grpc/health/v1/health.proto"], {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const root = grpc.loadPackageDefinition(definition);
  Inference = (root.inference as grpc.GrpcObject).GRPCInferenceService as grpc.ServiceClientConstructor;
  const health = ((root.grpc as grpc.GrpcObject).health as grpc.GrpcObject).v1 as grpc.GrpcObject;
  Health = health.Health as grpc.ServiceClientConstructor;
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  await cleanup();
});

function connect(Service: grpc.ServiceClientConstructor, port: number): grpc.Client {
  const client = new Service(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  clients.push(client);
  return client;
}

/** A unary call through grpc-js's generated method. */
function unary<T>(client: grpc.Client, method: string, request: object): Promise<T> {
  const fn = (client as unknown as Record<string, UnaryMethod>)[method];
  if (!fn) throw new Error(`no method ${method}`);
  return new Promise((resolve, reject) => {
    fn.call(client, request, new grpc.Metadata(), (error, response) => {
      if (error) reject(error);
      else resolve(response as T);
    });
  });
}

/** The ServiceError a unary call fails with. */
async function failure(call: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await call;
  } catch (error) {
    return error as grpc.ServiceError;
  }
  throw new Error("expected the call to fail");
}

const A = range(16);
const B = range(16).map((i) => 100 - i);

function simpleRequest(id: string, a = A, b = B) {
  return {
    model_name: "simple",
    id,
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: ["1", "16"] },
      { name: "INPUT1", datatype: "INT32", shape: ["1", "16"] },
    ],
    raw_input_contents: [Buffer.from(int32Bytes(a)), Buffer.from(int32Bytes(b))],
  };
}

function output(response: InferResponse | null | undefined, name: string): number[] {
  const at = response?.outputs.findIndex((o) => o.name === name) ?? -1;
  const raw = response?.raw_output_contents[at];
  if (!raw) throw new Error(`no output ${name}`);
  return readInt32(new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength));
}

describe("an @grpc/grpc-js client built from our .proto files", () => {
  it("calls ServerLive and ServerMetadata", async () => {
    const { grpcPort } = await startServer();
    const client = connect(Inference, grpcPort);
    expect(await unary(client, "ServerLive", {})).toEqual({ live: true });
    const metadata = await unary<{ name: string; version: string; extensions: string[] }>(client, "ServerMetadata", {});
    expect(metadata.name).toBe("triton");
    expect(metadata.version).not.toBe("");
    expect(metadata.extensions).toContain("model_repository");
  });

  it("calls ModelMetadata: int64 shapes with the -1 batch dimension", async () => {
    const { grpcPort } = await startServer();
    const client = connect(Inference, grpcPort);
    const metadata = await unary<{
      name: string;
      versions: string[];
      platform: string;
      inputs: Tensor[];
      outputs: Tensor[];
    }>(client, "ModelMetadata", { name: "simple", version: "" });
    expect(metadata).toEqual({
      name: "simple",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: ["-1", "16"] },
        { name: "INPUT1", datatype: "INT32", shape: ["-1", "16"] },
      ],
      outputs: [
        { name: "OUTPUT0", datatype: "INT32", shape: ["-1", "16"] },
        { name: "OUTPUT1", datatype: "INT32", shape: ["-1", "16"] },
      ],
    });
  });

  it("calls ModelInfer on simple with raw_input_contents and reads raw_output_contents", async () => {
    const { grpcPort } = await startServer();
    const client = connect(Inference, grpcPort);
    const response = await unary<InferResponse>(client, "ModelInfer", simpleRequest("compat-1"));
    expect(response.model_name).toBe("simple");
    expect(response.model_version).toBe("1");
    expect(response.id).toBe("compat-1");
    expect(response.outputs.map((o) => [o.name, o.datatype, o.shape])).toEqual([
      ["OUTPUT0", "INT32", ["1", "16"]],
      ["OUTPUT1", "INT32", ["1", "16"]],
    ]);
    expect(response.raw_output_contents).toHaveLength(2);
    expect(output(response, "OUTPUT0")).toEqual(A.map((v, i) => v + (B[i] ?? 0)));
    expect(output(response, "OUTPUT1")).toEqual(A.map((v, i) => v - (B[i] ?? 0)));

    // Typed contents through grpc-js too.
    const typed = await unary<InferResponse>(client, "ModelInfer", {
      model_name: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: ["1", "16"], contents: { int_contents: A } },
        { name: "INPUT1", datatype: "INT32", shape: ["1", "16"], contents: { int_contents: B } },
      ],
    });
    expect(output(typed, "OUTPUT0")).toEqual(A.map((v, i) => v + (B[i] ?? 0)));
  });

  it("receives Triton's error status codes", async () => {
    const { grpcPort } = await startServer();
    const client = connect(Inference, grpcPort);
    const unknown = await failure(unary(client, "ModelInfer", { ...simpleRequest("x"), model_name: "nope" }));
    expect(unknown.code).toBe(grpc.status.NOT_FOUND);
    const mixed = simpleRequest("y");
    const bad = await failure(
      unary(client, "ModelInfer", {
        ...mixed,
        inputs: [{ ...mixed.inputs[0], contents: { int_contents: A } }, mixed.inputs[1]],
      }),
    );
    expect(bad.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(bad.details).toBe(
      "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'",
    );
    const load = await failure(unary(client, "RepositoryModelLoad", { model_name: "simple" }));
    expect(load.code).toBe(grpc.status.UNAVAILABLE);
  });

  it("receives error details with ':' and other URI-reserved characters as plain text", async () => {
    // grpc-message is percent-encoded only outside %x20-%x24 / %x26-%x7E (gRPC over HTTP/2 spec),
    // as Triton's C++ gRPC does; grpc-js decodes it with decodeURI, which leaves %3A, %2C, %2F, ... as is.
    const { grpcPort } = await startServer();
    const client = connect(Inference, grpcPort);
    const unknown = await failure(unary(client, "ModelInfer", { ...simpleRequest("x"), model_name: "nope" }));
    expect(unknown.code).toBe(grpc.status.NOT_FOUND);
    expect(unknown.details).toBe("Request for unknown model: 'nope' is not found");
    const missing = simpleRequest("id/1");
    const partial = await failure(
      unary(client, "ModelInfer", {
        ...missing,
        inputs: missing.inputs.slice(0, 1),
        raw_input_contents: missing.raw_input_contents.slice(0, 1),
      }),
    );
    expect(partial.details).toBe(
      "[request id: id/1] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    );
    const load = await failure(unary(client, "RepositoryModelLoad", { model_name: "simple" }));
    expect(load.details).toBe("explicit model load / unload is not allowed if polling is enabled");
  });

  it("streams three requests through ModelStreamInfer and gets three responses", async () => {
    const { grpcPort } = await startServer();
    const client = connect(Inference, grpcPort) as grpc.Client & {
      ModelStreamInfer(): grpc.ClientDuplexStream<object, StreamResponse>;
    };
    const stream = client.ModelStreamInfer();
    const responses: StreamResponse[] = [];
    const ended = new Promise<void>((resolve, reject) => {
      stream.on("data", (response: StreamResponse) => responses.push(response));
      stream.on("error", reject);
      stream.on("end", resolve);
    });
    stream.write(simpleRequest("s-1", A, B));
    stream.write(simpleRequest("s-2", B, A));
    stream.write(simpleRequest("s-3", A, A));
    stream.end();
    await ended;
    expect(responses).toHaveLength(3);
    expect(responses.every((r) => r.error_message === "")).toBe(true);
    const byId = new Map(responses.map((r) => [r.infer_response?.id, r.infer_response]));
    expect([...byId.keys()].sort()).toEqual(["s-1", "s-2", "s-3"]);
    expect(output(byId.get("s-1"), "OUTPUT0")).toEqual(A.map((v, i) => v + (B[i] ?? 0)));
    expect(output(byId.get("s-2"), "OUTPUT1")).toEqual(B.map((v, i) => v - (A[i] ?? 0)));
    expect(output(byId.get("s-3"), "OUTPUT0")).toEqual(A.map((v) => 2 * v));
  });

  it("reads and changes trace settings as tritonclient's update_trace_settings sends them", async () => {
    const { grpcPort } = await startServer({ controlMode: "explicit", loadModels: ["simple"] });
    const client = connect(Inference, grpcPort);
    type Settings = { settings: Record<string, { value: string[] }> };
    const values = (r: Settings) => Object.fromEntries(Object.entries(r.settings).map(([k, v]) => [k, v.value]));
    const set = await unary<Settings>(client, "TraceSetting", {
      model_name: "simple",
      settings: { trace_rate: { value: ["5"] }, trace_count: { value: ["2"] } },
    });
    expect(values(set)).toMatchObject({
      trace_rate: ["5"],
      trace_count: ["2"],
      trace_level: ["OFF"],
      trace_mode: ["triton"],
    });
    // None in tritonclient is an empty list: the model's rate follows the global one again.
    const cleared = await unary<Settings>(client, "TraceSetting", {
      model_name: "simple",
      settings: { trace_rate: { value: [] } },
    });
    expect(values(cleared).trace_rate).toEqual(["1000"]);
    const unknown = await failure(unary(client, "TraceSetting", { model_name: "nope" }));
    expect([unknown.code, unknown.details]).toEqual([grpc.status.INVALID_ARGUMENT, "Request for unknown model : nope"]);
    const metadata = await unary<{ extensions: string[] }>(client, "ServerMetadata", {});
    expect(metadata.extensions).toContain("trace");
  });

  it("calls grpc.health.v1.Health/Check", async () => {
    const { grpcPort, server } = await startServer();
    const health = connect(Health, grpcPort);
    expect(await unary(health, "Check", { service: "" })).toEqual({ status: "SERVING" });
    server.core.beginShutdown();
    expect(await unary(health, "Check", { service: "" })).toEqual({ status: "NOT_SERVING" });
  });
});

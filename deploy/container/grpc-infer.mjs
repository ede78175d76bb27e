// Usage: node deploy/container/grpc-infer.mjs HOST:PORT
// A real inference over gRPC against a running Galley, with a client that is not Galley's own:
// @grpc/grpc-js with the service loaded at run time from proto/inference/grpc_service.proto.
// Checks ServerLive, ServerReady, ModelReady and ModelInfer on `simple` (OUTPUT0 = INPUT0 + INPUT1,
// OUTPUT1 = INPUT0 - INPUT1 over 16 int32 values as raw_input_contents); exits 1 on any mismatch.
import { fileURLToPath } from "node:url";
import { credentials, loadPackageDefinition } from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";

const target = process.argv[2];
if (!target) {
  console.error("usage: node grpc-infer.mjs HOST:PORT");
  process.exit(2);
}
const protoRoot = fileURLToPath(new URL("../../proto/", import.meta.url));
const definition = loadSync("inference/grpc_service.proto", {
  includeDirs: [protoRoot],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
});
const { inference } = loadPackageDefinition(definition);
const client = new inference.GRPCInferenceService(target, credentials.createInsecure());

/** One unary call with a 10 s deadline. */
function call(method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 10_000 }, (error, response) =>
      error ? reject(new Error(`${method}: ${error.message}`)) : resolve(response),
    );
  });
}

function int32Bytes(values) {
  const bytes = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => {
    bytes.writeInt32LE(v, i * 4);
  });
  return bytes;
}

function int32Values(bytes) {
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readInt32LE(i * 4));
}

const in0 = Array.from({ length: 16 }, (_, i) => i);
const in1 = Array.from({ length: 16 }, () => 1);
try {
  const live = await call("ServerLive", {});
  const ready = await call("ServerReady", {});
  const modelReady = await call("ModelReady", { name: "simple", version: "" });
  if (!live.live || !ready.ready || !modelReady.ready) {
    throw new Error(`not ready: live=${live.live} ready=${ready.ready} simple=${modelReady.ready}`);
  }
  const response = await call("ModelInfer", {
    model_name: "simple",
    id: "grpc-infer",
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16] },
    ],
    outputs: [{ name: "OUTPUT0" }, { name: "OUTPUT1" }],
    raw_input_contents: [int32Bytes(in0), int32Bytes(in1)],
  });
  const names = response.outputs.map((o) => o.name);
  const out0 = int32Values(response.raw_output_contents[names.indexOf("OUTPUT0")]);
  const out1 = int32Values(response.raw_output_contents[names.indexOf("OUTPUT1")]);
  const want0 = in0.map((v, i) => v + in1[i]);
  const want1 = in0.map((v, i) => v - in1[i]);
  if (JSON.stringify(out0) !== JSON.stringify(want0) || JSON.stringify(out1) !== JSON.stringify(want1)) {
    throw new Error(`wrong outputs: OUTPUT0=${out0} OUTPUT1=${out1}`);
  }
  console.log(`gRPC ModelInfer simple: ok (id ${response.id}, model version ${response.model_version})`);
} catch (error) {
  console.error(`gRPC check failed: ${error.message}`);
  process.exitCode = 1;
} finally {
  client.close();
}

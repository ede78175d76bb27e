// What the gRPC frontend's own encoding costs per ModelInfer call, before and after node:http2:
// reading the request (protobuf-es's `fromBinary` + `requestFromGrpc`, the general path, against
// the unary path's one-pass `leanRequestFromGrpc`) and writing the response (protobuf-es's `create`
// + `toBinary`, as connect-node writes it, against the unary path's one-pass head, `responsePieces`),
// for `simple` (two INT32 [1,16] tensors each way), in this process, interleaved; the same response
// as ModelStreamInfer writes a decoupled model's (with `triton_final_response`: the message built
// by `create` and written by `toBinary`, against `responseToGrpc`'s message without reflection and
// the one-pass head with its parameters); and the client's side, the other way round: its
// request's head (`toBinary` against `encodeModelInferRequest`) and the response, unary and
// streamed (`fromBinary` against `decodeModelInferResponse`). The one-pass code on both sides is
// @galley/proto's model-infer-codec.ts.
//
//   npx tsx bench/grpc-codec.ts [--reps=5] [--calls=200000]
import { loadavg } from "node:os";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  decodeModelInferResponse,
  encodeModelInferRequest,
  encodeModelInferResponse,
  InferParameterSchema,
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  toInferParameter,
} from "@galley/proto";
import {
  decodeModelInfer,
  leanRequestFromGrpc,
  requestFromGrpc,
  responsePieces,
  responseToGrpc,
} from "../packages/server/src/frontend/grpc/grpc-codec.js";
import { option } from "./lib/setup.js";
import { formatSpread, spread, table } from "./lib/stats.js";

const reps = option("reps", 5);
const calls = option("calls", 200_000);
const NAMES = ["0", "1"];
const requestMessage = create(ModelInferRequestSchema, {
  modelName: "simple",
  inputs: NAMES.map((n) => ({ name: `INPUT${n}`, datatype: "INT32", shape: [1n, 16n] })),
  outputs: NAMES.map((n) => ({ name: `OUTPUT${n}` })),
  rawInputContents: NAMES.map(() => new Uint8Array(64)),
});
const request = toBinary(ModelInferRequestSchema, requestMessage);
const response = () => ({
  modelName: "simple",
  modelVersion: "1",
  id: "",
  parameters: {},
  outputs: NAMES.map((n) => ({
    name: `OUTPUT${n}`,
    datatype: "INT32" as const,
    shape: [1, 16],
    data: new Uint8Array(64),
    parameters: {},
  })),
});
const encoded = Buffer.concat(responsePieces(response()).pieces);
/** The response as protobuf-es's `create` builds it (connect-node's way, and Galley's before). */
const created = () => {
  const r = response();
  return create(ModelInferResponseSchema, {
    modelName: r.modelName,
    modelVersion: r.modelVersion,
    id: r.id,
    outputs: r.outputs.map((o) => ({ name: o.name, datatype: o.datatype, shape: o.shape.map(BigInt) })),
    rawOutputContents: r.outputs.map((o) => o.data),
  });
};
/** A decoupled model's response: every one carries `triton_final_response`. Built by `create`... */
const createdStream = () => {
  const message = created();
  message.parameters.triton_final_response = create(InferParameterSchema, {
    parameterChoice: { case: "boolParam", value: false },
  });
  return message;
};
/** ... and as ModelStreamInfer builds it now (`responseToGrpc`, `toInferParameter`: no reflection). */
const streamResponse = () => {
  const message = responseToGrpc(response());
  message.parameters.triton_final_response = toInferParameter(false);
  return message;
};
const streamHead = toBinary(ModelInferResponseSchema, { ...streamResponse(), rawOutputContents: [] }).length;
const streamEncoded = Buffer.concat(encodeModelInferResponse(streamResponse()).pieces);
/** Each way, returning a size that must be the same every call (the inputs' bytes, the response's). */
const ways: Record<string, [number, () => number]> = {
  "request: fromBinary + requestFromGrpc": [128, () => requestFromGrpc(decodeModelInfer(request)).inputs.length * 64],
  "request: leanRequestFromGrpc": [128, () => (leanRequestFromGrpc(request)?.inputs.length ?? 0) * 64],
  "response: create + toBinary": [
    187,
    () => toBinary(ModelInferResponseSchema, { ...created(), rawOutputContents: [] }).length + 2 * 66,
  ],
  "response: one-pass head (responsePieces)": [187, () => responsePieces(response()).byteLength],
  "stream response: create + toBinary head": [
    streamHead,
    () => toBinary(ModelInferResponseSchema, { ...createdStream(), rawOutputContents: [] }).length,
  ],
  "stream response: responseToGrpc + one-pass head": [
    streamHead + 2 * 66,
    () => encodeModelInferResponse(streamResponse()).byteLength,
  ],
  "client request: toBinary head": [
    request.length,
    () => toBinary(ModelInferRequestSchema, { ...requestMessage, rawInputContents: [] }).length + 2 * 66,
  ],
  "client request: encodeModelInferRequest": [request.length, () => encodeModelInferRequest(requestMessage).byteLength],
  "client response: fromBinary": [
    128,
    () => fromBinary(ModelInferResponseSchema, encoded).rawOutputContents.length * 64,
  ],
  "client response: decodeModelInferResponse": [
    128,
    () => decodeModelInferResponse(encoded).rawOutputContents.length * 64,
  ],
  "client stream response: fromBinary": [
    128,
    () => fromBinary(ModelInferResponseSchema, streamEncoded).rawOutputContents.length * 64,
  ],
  "client stream response: decodeModelInferResponse": [
    128,
    () => decodeModelInferResponse(streamEncoded).rawOutputContents.length * 64,
  ],
};
const results = new Map<string, number[]>();
for (let rep = -1; rep < reps; rep++) {
  for (const [name, [size, run]] of Object.entries(ways)) {
    let bytes = 0;
    const start = process.hrtime.bigint();
    for (let i = 0; i < calls; i++) bytes += run();
    const us = Number(process.hrtime.bigint() - start) / calls / 1000;
    if (bytes !== calls * size) throw new Error(`${name}: ${bytes / calls} bytes a call, expected ${size}`);
    if (rep >= 0) results.set(name, [...(results.get(name) ?? []), us]);
  }
}
console.log(`node ${process.version}, load average ${loadavg()[0]?.toFixed(2)}; ${reps} × ${calls} calls each`);
console.log(
  table(
    ["way", "µs per call"],
    [...results].map(([name, v]) => [name, formatSpread(spread(v), 2)]),
  ),
);

// A gRPC tensor's shared_memory_* parameters as Triton reads them (server src/grpc/grpc_utils.h,
// ParseSharedMemoryParams), for inputs and outputs, on the lean ModelInfer path and through
// connect-node: a region needs its byte size (an output without one was INTERNAL, "0 bytes"),
// an offset or byte size needs a region, and each has its type. All INVALID_ARGUMENT.
import { randomBytes } from "node:crypto";
import { rmSync, writeFileSync } from "node:fs";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { type InferParameter, ModelInferRequestSchema } from "@galley/proto";
import { afterEach, describe, expect, it } from "vitest";
import { frame, rawGrpc } from "./grpc-wire.js";
import { cleanup, expectGrpcError, int32Bytes, range, startServer } from "./support/harness.js";

const made: string[] = [];
afterEach(async () => {
  await cleanup();
  for (const path of made.splice(0)) rmSync(path, { force: true });
});

/** A /dev/shm object of `size` bytes; returns its key (`/name`). */
function shmObject(size: number): string {
  const name = `galley-test-${process.pid}-${randomBytes(4).toString("hex")}`;
  writeFileSync(`/dev/shm/${name}`, new Uint8Array(size));
  made.push(`/dev/shm/${name}`);
  return `/${name}`;
}

type Parameters = Record<string, InferParameter>;
const int64 = (value: bigint) => ({ parameterChoice: { case: "int64Param", value } }) as InferParameter;
const str = (value: string) => ({ parameterChoice: { case: "stringParam", value } }) as InferParameter;

/** `simple` with INPUT0 given `input` parameters (raw contents unless it names a region), OUTPUT0 `output`. */
function request(input: Parameters, output: Parameters) {
  const shm = "shared_memory_region" in input;
  return {
    modelName: "simple",
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1n, 16n], parameters: input },
      { name: "INPUT1", datatype: "INT32", shape: [1n, 16n] },
    ],
    outputs: [{ name: "OUTPUT0", parameters: output }],
    rawInputContents: shm ? [int32Bytes(range(16))] : [int32Bytes(range(16)), int32Bytes(range(16))],
  };
}

const cases: [string, Parameters, Parameters, string][] = [
  [
    "an output region without its byte size",
    {},
    { shared_memory_region: str("r") },
    "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'OUTPUT0'",
  ],
  [
    "an input region without its byte size",
    { shared_memory_region: str("r"), shared_memory_offset: int64(0n) },
    {},
    "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'INPUT0'",
  ],
  [
    "a byte size without a region",
    {},
    { shared_memory_byte_size: int64(64n) },
    "'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor 'OUTPUT0'",
  ],
  [
    "an offset without a region",
    { shared_memory_offset: int64(0n) },
    {},
    "'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor 'INPUT0'",
  ],
  [
    "a region that is not a string",
    {},
    { shared_memory_region: int64(1n), shared_memory_byte_size: int64(64n) },
    "invalid value type for 'shared_memory_region' parameter for tensor 'OUTPUT0', expected string_param.",
  ],
  [
    "an offset that is not an int64",
    {},
    { shared_memory_region: str("r"), shared_memory_offset: str("0"), shared_memory_byte_size: int64(64n) },
    "invalid value type for 'shared_memory_offset' parameter for tensor 'OUTPUT0', expected int64_param.",
  ],
  [
    "a byte size that is not an int64",
    { shared_memory_region: str("r"), shared_memory_byte_size: str("64") },
    {},
    "invalid value type for 'shared_memory_byte_size' parameter for tensor 'INPUT0', expected int64_param.",
  ],
];

describe("shared-memory parameters of gRPC tensors", () => {
  for (const [what, input, output, message] of cases) {
    it(`answers ${what} INVALID_ARGUMENT, on both ModelInfer paths`, async () => {
      const { client, grpcUrl } = await startServer({ allowClientShm: true });
      await client.systemSharedMemoryRegister({ name: "r", key: shmObject(64), byteSize: 64n });
      await expectGrpcError(client.modelInfer(request(input, output)), Code.InvalidArgument, message);
      const bytes = toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, request(input, output)));
      const reply = await rawGrpc(grpcUrl, "/inference.GRPCInferenceService/ModelInfer", [frame(bytes)]);
      expect([reply.status, reply.message]).toEqual([Code.InvalidArgument, message]);
    });
  }
});

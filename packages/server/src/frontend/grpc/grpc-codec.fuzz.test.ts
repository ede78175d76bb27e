// Fuzzing the gRPC ModelInfer decode path (what serveModelInfer does with a received message):
// valid encodings of random requests, then cut, overwritten, spliced or replaced by random bytes.
// Decoding and conversion to a core request either succeed or fail with an error from the table
// (GRPC_BAD_MESSAGE for bytes that are not a ModelInferRequest); nothing else is thrown and
// nothing hangs. The unary path's one-pass decoder (leanRequestFromGrpc) must, for any bytes, either
// leave them to that path or give exactly the core request that path gives.
import { create, toBinary } from "@bufbuild/protobuf";
import { type InferParameter, ModelInferRequestSchema } from "@galley/proto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeOrTableError, showBytes } from "../../../test/support/fuzz.js";
import { InferenceError } from "../../base/errors.js";
import { decodeModelInfer, leanRequestFromGrpc, requestFromGrpc } from "./grpc-codec.js";

const int64 = fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n });

const parameter: fc.Arbitrary<InferParameter["parameterChoice"]> = fc.oneof(
  fc.boolean().map((value) => ({ case: "boolParam" as const, value })),
  int64.map((value) => ({ case: "int64Param" as const, value })),
  fc.string({ maxLength: 6 }).map((value) => ({ case: "stringParam" as const, value })),
  fc.double().map((value) => ({ case: "doubleParam" as const, value })),
  fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }).map((value) => ({ case: "uint64Param" as const, value })),
);

const parameters = fc.dictionary(
  fc.constantFrom(
    "sequence_id",
    "sequence_start",
    "priority",
    "timeout",
    "triton_enable_empty_final_response",
    "triton_x",
    "shared_memory_region",
    "shared_memory_offset",
    "classification",
    "p",
  ),
  parameter.map((parameterChoice) => ({ parameterChoice })),
  { maxKeys: 3 },
);

const contents = fc.oneof(
  fc.record({ fp32Contents: fc.array(fc.float(), { maxLength: 8 }) }),
  fc.record({ fp64Contents: fc.array(fc.double(), { maxLength: 8 }) }),
  fc.record({ intContents: fc.array(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { maxLength: 8 }) }),
  fc.record({ int64Contents: fc.array(int64, { maxLength: 8 }) }),
  fc.record({ uintContents: fc.array(fc.nat(), { maxLength: 8 }) }),
  fc.record({ boolContents: fc.array(fc.boolean(), { maxLength: 8 }) }),
  fc.record({ bytesContents: fc.array(fc.uint8Array({ maxLength: 8 }), { maxLength: 4 }) }),
  fc.record({
    fp32Contents: fc.array(fc.float(), { maxLength: 4 }),
    intContents: fc.array(fc.integer(), { maxLength: 4 }),
  }),
);

const tensor = fc.record(
  {
    name: fc.constantFrom("INPUT0", "INPUT1", "X", ""),
    datatype: fc.constantFrom(
      "FP32",
      "FP64",
      "INT8",
      "INT32",
      "INT64",
      "UINT16",
      "UINT64",
      "BOOL",
      "BYTES",
      "FP16",
      "NO",
    ),
    shape: fc.array(fc.oneof(fc.bigInt({ min: -2n, max: 8n }), int64), { maxLength: 3 }),
    parameters,
    contents,
  },
  { requiredKeys: ["name", "datatype", "shape"] },
);

const request = fc.record(
  {
    modelName: fc.string({ maxLength: 8 }),
    modelVersion: fc.string({ maxLength: 2 }),
    id: fc.string({ maxLength: 4 }),
    parameters,
    inputs: fc.array(tensor, { maxLength: 3 }),
    outputs: fc.array(fc.record({ name: fc.string({ maxLength: 4 }), parameters }), { maxLength: 2 }),
    rawInputContents: fc.array(fc.uint8Array({ maxLength: 24 }), { maxLength: 3 }),
  },
  { requiredKeys: [] },
);

const encoded = request.map((init) => toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, init)));

/** An encoding cut short, with bytes overwritten, spliced in or taken out, or just random bytes. */
const damaged = fc.oneof(
  fc.tuple(encoded, fc.nat()).map(([bytes, at]) => bytes.subarray(0, at % (bytes.length + 1))),
  fc.tuple(encoded, fc.nat(), fc.integer({ min: 0, max: 255 })).map(([bytes, at, value]) => {
    const copy = Uint8Array.from(bytes);
    if (copy.length > 0) copy[at % copy.length] = value;
    return copy;
  }),
  fc.tuple(encoded, fc.nat(), fc.uint8Array({ maxLength: 6 }), fc.nat(4)).map(([bytes, at, insert, drop]) => {
    const cut = at % (bytes.length + 1);
    return Uint8Array.from([...bytes.subarray(0, cut), ...insert, ...bytes.subarray(cut + drop)]);
  }),
  fc.uint8Array({ maxLength: 120 }),
);

/** Decode as serveModelInfer does; undefined on success, else the error from the table. */
function decode(bytes: Uint8Array): InferenceError | undefined {
  const result = decodeOrTableError(
    () => requestFromGrpc(decodeModelInfer(bytes)),
    () => showBytes(bytes),
  );
  return result instanceof InferenceError ? result : undefined;
}

describe("fuzzing the gRPC ModelInfer decode path", () => {
  it("decodes every valid encoding, or refuses its contents with an error from the table", () => {
    fc.assert(
      fc.property(encoded, (bytes) => {
        expect(decode(bytes)?.id).not.toBe("GRPC_BAD_MESSAGE");
      }),
      { numRuns: 500 },
    );
  });

  it("answers damaged or random bytes with an error from the table, never another throw or a hang", () => {
    let refused = 0;
    fc.assert(
      fc.property(damaged, (bytes) => {
        if (decode(bytes)?.id === "GRPC_BAD_MESSAGE") refused++;
      }),
      { numRuns: 1500 },
    );
    expect(refused).toBeGreaterThan(50);
  });

  it("decodes in one pass only what the general path decodes, to the same request", () => {
    const ascii = fc.oneof(
      fc.string({ unit: fc.constantFrom(..."abcXYZ_0189.-/"), maxLength: 10 }),
      fc.string({ unit: fc.constantFrom(..."ab_9"), minLength: 30, maxLength: 300 }),
    );
    const common = fc
      .array(
        fc.record({
          name: ascii,
          datatype: fc.constantFrom("FP32", "INT32", "BYTES", ""),
          shape: fc.array(
            fc.oneof(
              { weight: 6, arbitrary: fc.bigInt({ min: 0n, max: 300n }) },
              { weight: 2, arbitrary: fc.bigInt({ min: 0n, max: (1n << 49n) - 1n }) },
              { weight: 1, arbitrary: fc.bigInt({ min: -2n, max: -1n }) },
              { weight: 1, arbitrary: fc.bigInt({ min: 1n << 49n, max: (1n << 63n) - 1n }) },
            ),
            { maxLength: 4 },
          ),
          raw: fc.uint8Array({ maxLength: 40 }),
        }),
        { maxLength: 4 },
      )
      .chain((inputs) =>
        fc.record({
          modelName: ascii,
          modelVersion: fc.constantFrom("", "1", "12"),
          id: ascii,
          inputs: fc.constant(inputs.map(({ name, datatype, shape }) => ({ name, datatype, shape }))),
          outputs: fc.array(fc.record({ name: ascii }), { maxLength: 3 }),
          rawInputContents: fc.constant(inputs.map(({ raw }) => raw)),
        }),
      )
      .map((init) => toBinary(ModelInferRequestSchema, create(ModelInferRequestSchema, init)));
    let covered = 0;
    fc.assert(
      fc.property(fc.oneof(common, encoded, damaged), (bytes) => {
        const lean = leanRequestFromGrpc(bytes);
        if (lean === undefined) return;
        covered++;
        expect(lean).toEqual(requestFromGrpc(decodeModelInfer(bytes)));
      }),
      { numRuns: 4000 },
    );
    expect(covered).toBeGreaterThan(500);
    // What tritonclient and perf_analyzer send for `simple` is covered.
    const simple = toBinary(
      ModelInferRequestSchema,
      create(ModelInferRequestSchema, {
        modelName: "simple",
        inputs: ["INPUT0", "INPUT1"].map((name) => ({ name, datatype: "INT32", shape: [1n, 16n] })),
        outputs: [{ name: "OUTPUT0" }, { name: "OUTPUT1" }],
        rawInputContents: [new Uint8Array(64), new Uint8Array(64).fill(1)],
      }),
    );
    expect(leanRequestFromGrpc(simple)?.inputs.map((i) => i.shape)).toEqual([
      [1, 16],
      [1, 16],
    ]);
  });
});

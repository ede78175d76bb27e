// The unary path's ModelInfer response pieces against protobuf-es: for random core responses (names
// in any script, lone surrogates, empty strings, zero and 2^53-sized dims, parameters, negative
// dims), the pieces `responsePieces` writes, put together, are byte for byte what `create` +
// `toBinary` make of the same response — whether the head is written directly or by protobuf-es.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ModelInferResponseSchema, toInferParameters } from "@galley/proto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { InferenceResponse } from "../../base/inference-request.js";
import type { Tensor } from "../../base/tensor.js";
import { responsePieces, responseToGrpc } from "./grpc-codec.js";

const text = fc.oneof(
  fc.constant(""),
  fc.string({ maxLength: 12 }),
  fc.string({ unit: "grapheme", maxLength: 6 }),
  fc.string({ unit: "binary", maxLength: 6 }),
  fc.constant("x".repeat(200)),
);
const dim = fc.oneof(
  fc.integer({ min: 0, max: 300 }),
  fc.constantFrom(0, 127, 128, 16383, 16384, 2 ** 31, 2 ** 53 - 1),
  fc.integer({ min: -3, max: -1 }),
);
const output: fc.Arbitrary<Tensor> = fc.record({
  name: text,
  datatype: fc.constantFrom("FP32", "INT32", "BYTES", "UINT8", ""),
  shape: fc.array(dim, { maxLength: 5 }),
  data: fc.uint8Array({ maxLength: 300 }),
  parameters: fc.constant({}),
}) as fc.Arbitrary<Tensor>;
const response: fc.Arbitrary<InferenceResponse> = fc.record({
  modelName: text,
  modelVersion: fc.oneof(fc.constant("1"), text),
  id: text,
  parameters: fc.oneof(
    fc.constant({}),
    fc.dictionary(fc.string({ maxLength: 4 }), fc.oneof(fc.boolean(), fc.string(), fc.integer()), { maxKeys: 2 }),
  ),
  outputs: fc.array(output, { maxLength: 4 }),
});

const joined = (pieces: Uint8Array[]) => Buffer.concat(pieces);

describe("responsePieces", () => {
  it("writes what protobuf-es writes, for any response", () => {
    fc.assert(
      fc.property(response, (r) => {
        const { pieces, byteLength } = responsePieces(r);
        const bytes = joined(pieces);
        expect(bytes.byteLength).toBe(byteLength);
        expect(bytes.equals(toBinary(ModelInferResponseSchema, responseToGrpc(r)))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it("responseToGrpc's message is create's, field for field", () => {
    fc.assert(
      fc.property(response, (r) => {
        const made = create(ModelInferResponseSchema, {
          modelName: r.modelName,
          modelVersion: r.modelVersion,
          id: r.id,
          parameters: toInferParameters(r.parameters),
          outputs: r.outputs.map((o) => ({ name: o.name, datatype: o.datatype, shape: o.shape.map(BigInt) })),
          rawOutputContents: r.outputs.map((o) => o.data),
        });
        expect(responseToGrpc(r)).toStrictEqual(made);
      }),
      { numRuns: 1000 },
    );
  });

  it("keeps the outputs' bytes as views, not copies", () => {
    const data = new Uint8Array(64).fill(7);
    const r: InferenceResponse = {
      modelName: "simple",
      modelVersion: "1",
      id: "",
      parameters: {},
      outputs: [{ name: "OUTPUT0", datatype: "INT32", shape: [1, 16], data, parameters: {} }],
    };
    const { pieces } = responsePieces(r);
    expect(pieces.at(-1)).toBe(data);
    const decoded = fromBinary(ModelInferResponseSchema, joined(pieces));
    expect(decoded.modelName).toBe("simple");
    expect(decoded.outputs[0]?.shape).toEqual([1n, 16n]);
    expect(Array.from(decoded.rawOutputContents[0] ?? [])).toEqual(Array.from(data));
  });
});

// Fuzzing the REST inference body: a JSON header (well formed, or not), binary tensor data after
// it, and any Inference-Header-Content-Length. Decoding either fails with an error from the table
// or accounts for every byte: each binary input is a view of exactly its bytes of the body, and
// together they are the whole tail. Nothing else is thrown and nothing hangs.
import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema } from "@galley/proto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decodeOrTableError, showBytes } from "../../../test/support/fuzz.js";
import { InferenceError } from "../../base/errors.js";
import type { ModelView } from "../../core/inference-server.js";
import type { Body } from "../transport/http-exchange.js";
import { atoi, decodeInfer } from "./infer-request.js";

const encoder = new TextEncoder();

function model(dataType: DataType, dims: number[], maxBatchSize: number, inputs = 1): ModelView {
  const config = create(ModelConfigSchema, {
    name: "m",
    maxBatchSize,
    input: Array.from({ length: inputs }, (_, i) => ({ name: `IN${i}`, dataType, dims: dims.map(BigInt) })),
  });
  return { config } as unknown as ModelView;
}

/** Models for the raw path (header length 0): one input of a fixed, variable or BYTES shape, or two inputs. */
const MODELS = [
  model(DataType.TYPE_FP32, [4], 8),
  model(DataType.TYPE_INT8, [-1], 0),
  model(DataType.TYPE_FP64, [-1, 2], 4),
  model(DataType.TYPE_STRING, [1], 0),
  model(DataType.TYPE_INT32, [-1, -1], 0),
  model(DataType.TYPE_UINT16, [3], 0, 2),
];

const TYPES = ["FP32", "INT8", "BYTES", "BOOL", "UINT64", "FP16", "NOPE"];
const number = fc.oneof(fc.nat(40), fc.constantFrom(-1, 1.5, 2 ** 40, 2 ** 64, Number.NaN));

const parameters = fc.record(
  {
    binary_data_size: number,
    shared_memory_region: fc.string({ maxLength: 4 }),
    shared_memory_byte_size: number,
  },
  { requiredKeys: [] },
);

const input = fc.record(
  {
    name: fc.constantFrom("IN0", "IN1", "X", ""),
    datatype: fc.constantFrom(...TYPES),
    shape: fc.array(number, { maxLength: 3 }),
    parameters,
    data: fc.array(fc.oneof(fc.integer(), fc.double(), fc.string({ maxLength: 3 }), fc.boolean()), { maxLength: 8 }),
  },
  { requiredKeys: ["name", "datatype", "shape"] },
);

const output = fc.record(
  {
    name: fc.constantFrom("OUT0", "X"),
    parameters: fc.record(
      {
        binary_data: fc.oneof(fc.boolean(), fc.integer()),
        classification: number,
        shared_memory_region: fc.string({ maxLength: 4 }),
      },
      { requiredKeys: [] },
    ),
  },
  { requiredKeys: [] },
);

const header = fc.record(
  {
    id: fc.oneof(fc.string({ maxLength: 4 }), fc.integer()),
    inputs: fc.array(input, { maxLength: 3 }),
    outputs: fc.array(output, { maxLength: 2 }),
    parameters: fc.dictionary(
      fc.constantFrom("sequence_id", "priority", "timeout", "sequence_start", "binary_data_output", "triton_x", "p"),
      fc.oneof(number, fc.boolean(), fc.string({ maxLength: 3 }), fc.constant(null), fc.array(fc.nat(3))),
      { maxKeys: 3 },
    ),
  },
  { requiredKeys: ["inputs"] },
);

/** JSON of the header, sometimes with bytes cut, changed or added. */
const headerText = fc.oneof(
  { weight: 4, arbitrary: header.map((h) => JSON.stringify(h)) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(
        header.map((h) => JSON.stringify(h)),
        fc.nat(),
        fc.string({ maxLength: 3 }),
        fc.nat(3),
      )
      .map(([text, at, insert, drop]) => {
        const cut = at % (text.length + 1);
        return text.slice(0, cut) + insert + text.slice(cut + drop);
      }),
  },
);

/** The Inference-Header-Content-Length value: the right one, none, near misses, garbage. */
const lengthHeader = fc.oneof(
  fc.constant("exact"),
  fc.constant(undefined),
  fc.integer({ min: -3, max: 400 }).map(String),
  fc.constantFrom("0", " 12abc", "+5", "99999999999", "-0", ""),
);

/** A header whose binary inputs match the tail, so that decoding gets past the size checks. */
const matched = fc
  .array(
    fc.record({
      name: fc.constantFrom("IN0", "IN1"),
      datatype: fc.constantFrom(...TYPES),
      shape: fc.array(fc.nat(4), { maxLength: 2 }),
      bytes: fc.uint8Array({ maxLength: 24 }),
    }),
    { maxLength: 3 },
  )
  .map((inputs) => {
    const header = {
      inputs: inputs.map(({ bytes, ...rest }) => ({ ...rest, parameters: { binary_data_size: bytes.length } })),
    };
    return [JSON.stringify(header), Uint8Array.from(inputs.flatMap((i) => [...i.bytes]))] as const;
  });

const headerAndTail = fc.oneof(matched, fc.tuple(headerText, fc.uint8Array({ maxLength: 96 })));

describe("fuzzing the REST inference body", () => {
  it("decodes any header and binary tail, or fails with an error from the table", () => {
    let decoded = 0;
    fc.assert(
      fc.property(
        headerAndTail,
        lengthHeader,
        fc.nat(7),
        fc.constantFrom(...MODELS.keys()),
        ([json, tail], lengthValue, offset, which) => {
          const head = encoder.encode(json);
          const buffer = new ArrayBuffer(offset + head.length + tail.length);
          const bytes = new Uint8Array(buffer, offset);
          bytes.set(head);
          bytes.set(tail, head.length);
          const body: Body = { buffer, offset, bytes };
          const value = lengthValue === "exact" ? String(head.length) : lengthValue;
          const result = decodeOrTableError(
            () => decodeInfer(body, value, MODELS[which] as ModelView, "m", "1"),
            () => `header ${JSON.stringify(value)}, ${json.slice(0, 300)} + ${showBytes(tail)}`,
          );
          if (result instanceof InferenceError) return;
          decoded++;
          const start = value === undefined ? bytes.length : atoi(value);
          // Every tensor's bytes are a view of this body (binary; a raw BYTES input also takes the
          // room for its length prefix before it) or a buffer of their own (JSON).
          for (const tensor of result.request.inputs) {
            if (tensor.data.buffer === buffer) {
              expect(tensor.data.byteOffset).toBeGreaterThanOrEqual(start === 0 ? offset - 4 : offset);
              expect(tensor.data.byteOffset + tensor.data.byteLength).toBeLessThanOrEqual(buffer.byteLength);
            }
          }
          if (start === 0) {
            // A raw request: the whole body is the one input (a BYTES one with its length prefix).
            const [only] = result.request.inputs;
            expect(result.request.inputs).toHaveLength(1);
            expect((only?.data.byteLength ?? 0) - bytes.length).toBe(only?.datatype === "BYTES" ? 4 : 0);
            return;
          }
          // The binary inputs, in order, are exactly the bytes after the header.
          const binary = result.request.inputs.filter((t) => t.data.buffer === buffer && t.data.byteLength > 0);
          let at = offset + start;
          for (const tensor of binary) {
            expect(tensor.data.byteOffset).toBe(at);
            at += tensor.data.byteLength;
          }
          expect(at).toBe(buffer.byteLength);
        },
      ),
      { numRuns: 1000 },
    );
    // The generators reach the end of the decoder, not only its first checks.
    expect(decoded).toBeGreaterThan(50);
  });
});

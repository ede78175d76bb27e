// The ModelInfer codec: pieces that decode to the message with raw buffers uncopied; and the one-pass
// code against protobuf-es: for random messages (common ones, and ones
// with parameters, typed contents, negative or huge dims, any Unicode), the pieces the encoders
// write are byte for byte `toBinary`'s, and a response read in one pass, when it is read at all,
// equals `fromBinary`'s message — also for damaged bytes.
import { create, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  ModelInferRequestSchema,
  ModelInferResponseSchema,
  ModelStreamInferResponseSchema,
} from "./gen/inference/grpc_service_pb.js";
import {
  decodeModelInferResponse,
  encodeModelInferRequest,
  encodeModelInferResponse,
  encodeModelStreamInferResponse,
  readModelInferRequest,
  readModelInferResponse,
  writeModelInferResponseHead,
} from "./model-infer-codec.js";

const concat = (pieces: Uint8Array[]) => Uint8Array.from(pieces.flatMap((p) => [...p]));

describe("ModelInfer codec (raw contents as separate pieces)", () => {
  // Lengths around every varint boundary: 0, one byte, two bytes, three bytes.
  const sizes = [0, 1, 127, 128, 300, 16_383, 16_384, 70_000];

  it("encodes a request whose pieces decode to the same message, raw buffers passed through uncopied", () => {
    const raws = sizes.map((n, i) => Uint8Array.from({ length: n }, (_, j) => (i * 31 + j) & 0xff));
    const message = create(ModelInferRequestSchema, {
      modelName: "m",
      id: "x",
      inputs: sizes.map((_, i) => ({ name: `IN${i}`, datatype: "UINT8", shape: [BigInt(sizes[i] ?? 0)] })),
      parameters: { priority: { parameterChoice: { case: "uint64Param", value: 2n } } },
      rawInputContents: raws,
    });
    const before = message.rawInputContents;
    const { pieces, byteLength } = encodeModelInferRequest(message);
    for (const raw of raws) expect(pieces).toContain(raw);
    expect(byteLength).toBe(pieces.reduce((n, p) => n + p.byteLength, 0));
    const bytes = concat(pieces);
    expect(fromBinary(ModelInferRequestSchema, bytes)).toEqual(message);
    // The same message toBinary writes, up to field order: equal sizes.
    expect(byteLength).toBe(toBinary(ModelInferRequestSchema, message).byteLength);
    // The caller's message is left as it was.
    expect(message.rawInputContents).toBe(before);
    expect(before).toEqual(raws);
  });

  it("encodes a response the same way, and decodes raw outputs as views of the received bytes", () => {
    const raws = sizes.map((n) => new Uint8Array(n).fill(7));
    const message = create(ModelInferResponseSchema, {
      modelName: "m",
      modelVersion: "1",
      outputs: sizes.map((n, i) => ({ name: `OUT${i}`, datatype: "UINT8", shape: [BigInt(n)] })),
      rawOutputContents: raws,
    });
    const { pieces } = encodeModelInferResponse(message);
    const bytes = concat(pieces);
    const decoded = decodeModelInferResponse(bytes);
    expect(decoded).toEqual(message);
    for (const raw of decoded.rawOutputContents) expect(raw.buffer).toBe(bytes.buffer);
  });

  it("encodes a message without raw contents as one piece", () => {
    const message = create(ModelInferRequestSchema, { modelName: "m" });
    const { pieces } = encodeModelInferRequest(message);
    expect(pieces).toHaveLength(1);
    expect(fromBinary(ModelInferRequestSchema, pieces[0] as Uint8Array)).toEqual(message);
  });
});

const joined = (pieces: Uint8Array[]) => Buffer.concat(pieces);

const text = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: fc.constantFrom(..."abcXYZ_019.-"), maxLength: 10 }) },
  { weight: 1, arbitrary: fc.constant("") },
  { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 5 }) },
  { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 5 }) },
  { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(..."ab"), minLength: 33, maxLength: 200 }) },
);
const dim = fc.oneof(
  { weight: 8, arbitrary: fc.bigInt({ min: 0n, max: 300n }) },
  { weight: 2, arbitrary: fc.bigInt({ min: 0n, max: (1n << 53n) - 1n }) },
  { weight: 1, arbitrary: fc.bigInt({ min: -3n, max: -1n }) },
  { weight: 1, arbitrary: fc.bigInt({ min: 1n << 53n, max: (1n << 63n) - 1n }) },
);
/** An `InferParameter` of every kind, with the values at and past what the one-pass writer covers. */
const parameter = fc.oneof(
  fc.boolean().map((value) => ({ parameterChoice: { case: "boolParam" as const, value } })),
  fc.oneof(text, fc.string()).map((value) => ({ parameterChoice: { case: "stringParam" as const, value } })),
  fc
    .oneof(fc.bigInt({ min: 0n, max: 300n }), fc.bigInt({ min: -(1n << 63n), max: (1n << 63n) - 1n }))
    .map((value) => ({ parameterChoice: { case: "int64Param" as const, value } })),
  fc
    .oneof(fc.bigInt({ min: 0n, max: (1n << 53n) - 1n }), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }))
    .map((value) => ({ parameterChoice: { case: "uint64Param" as const, value } })),
  fc.double().map((value) => ({ parameterChoice: { case: "doubleParam" as const, value } })),
);
const parameters = fc.oneof(
  { weight: 4, arbitrary: fc.constant({}) },
  { weight: 1, arbitrary: fc.dictionary(fc.constantFrom("priority", "p"), parameter, { maxKeys: 1 }) },
  {
    weight: 1,
    arbitrary: fc.dictionary(fc.oneof(text, fc.constant("triton_final_response"), fc.constant("7")), parameter, {
      maxKeys: 4,
    }),
  },
);
const contents = fc.oneof(
  { weight: 4, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.array(fc.integer(), { maxLength: 3 }).map((intContents) => ({ intContents })) },
);
const tensor = fc.record({ name: text, datatype: text, shape: fc.array(dim, { maxLength: 4 }), parameters, contents });
const raws = fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 4 });

const request = fc
  .record({
    modelName: text,
    modelVersion: text,
    id: text,
    parameters,
    inputs: fc.array(tensor, { maxLength: 4 }),
    outputs: fc.array(fc.record({ name: text, parameters }), { maxLength: 3 }),
    rawInputContents: raws,
  })
  .map((init) => create(ModelInferRequestSchema, init as MessageInitShape<typeof ModelInferRequestSchema>));
const response = fc
  .record({
    modelName: text,
    modelVersion: text,
    id: text,
    parameters,
    outputs: fc.array(tensor, { maxLength: 4 }),
    rawOutputContents: raws,
  })
  .map((init) => create(ModelInferResponseSchema, init as MessageInitShape<typeof ModelInferResponseSchema>));

const name = fc.string({ unit: fc.constantFrom(..."abcXYZ_019.-"), maxLength: 10 });
/** What a server answers nearly always: ASCII names, dims from 0 to 2^53, no parameters or contents. */
const commonResponse = fc
  .record({
    modelName: name,
    modelVersion: name,
    id: name,
    outputs: fc.array(
      fc.record({ name, datatype: name, shape: fc.array(fc.bigInt({ min: 0n, max: 1n << 40n }), { maxLength: 4 }) }),
      { maxLength: 4 },
    ),
    rawOutputContents: raws,
  })
  .map((init) => create(ModelInferResponseSchema, init));

/** The same with its own parameters, as a decoupled model's responses carry `triton_final_response`. */
const commonWithParameters = fc.tuple(commonResponse, parameters).map(([common, params]) => {
  const { $typeName: _, ...init } = common;
  return create(ModelInferResponseSchema, { ...init, parameters: params });
});

/** An encoding cut short, a byte overwritten, or bytes spliced in. */
const damage = (bytes: Uint8Array) =>
  fc.oneof(
    fc.nat().map((at) => bytes.subarray(0, at % (bytes.length + 1))),
    fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })).map(([at, value]) => {
      const copy = Uint8Array.from(bytes);
      if (copy.length > 0) copy[at % copy.length] = value;
      return copy;
    }),
    fc.tuple(fc.nat(), fc.uint8Array({ maxLength: 4 })).map(([at, insert]) => {
      const cut = at % (bytes.length + 1);
      return Uint8Array.from([...bytes.subarray(0, cut), ...insert, ...bytes.subarray(cut)]);
    }),
  );

describe("ModelInfer in one pass", () => {
  it("writes requests and responses byte for byte as toBinary does", () => {
    fc.assert(
      fc.property(request, response, (req, res) => {
        const a = encodeModelInferRequest(req);
        expect(joined(a.pieces).equals(toBinary(ModelInferRequestSchema, req))).toBe(true);
        expect(a.byteLength).toBe(joined(a.pieces).byteLength);
        const b = encodeModelInferResponse(res);
        expect(joined(b.pieces).equals(toBinary(ModelInferResponseSchema, res))).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it("writes a response's own parameters in one pass, byte for byte as toBinary does", () => {
    let lean = 0;
    fc.assert(
      fc.property(commonWithParameters, (res) => {
        const params = res.parameters;
        const head = writeModelInferResponseHead(res, res.outputs);
        if (head === undefined) return;
        if (Object.keys(params).length > 0) lean++;
        expect(Buffer.from(head).equals(toBinary(ModelInferResponseSchema, { ...res, rawOutputContents: [] }))).toBe(
          true,
        );
      }),
      { numRuns: 2000 },
    );
    expect(lean).toBeGreaterThan(150);
    // A decoupled model's response: every one carries triton_final_response.
    const response = create(ModelInferResponseSchema, {
      modelName: "text_to_video",
      id: "",
      parameters: { triton_final_response: { parameterChoice: { case: "boolParam", value: false } } },
      outputs: [{ name: "STEP", datatype: "INT32", shape: [2n] }],
    });
    const head = writeModelInferResponseHead(response, response.outputs);
    expect(head && Buffer.from(head).equals(toBinary(ModelInferResponseSchema, response))).toBe(true);
    // ... and read back in one pass, as the client reads a stream.
    const read = readModelInferResponse(head as Uint8Array);
    expect(read?.parameters.triton_final_response?.parameterChoice).toEqual({ case: "boolParam", value: false });
    expect(read).toEqual(fromBinary(ModelInferResponseSchema, head as Uint8Array));
  });

  it("reads a response as fromBinary does, whole or damaged, or leaves it to fromBinary", () => {
    let read = 0;
    let withParameters = 0;
    fc.assert(
      fc.property(
        fc.oneof(response, commonResponse, commonWithParameters).chain((r) => {
          const bytes = toBinary(ModelInferResponseSchema, r);
          return fc.oneof(fc.constant(bytes), damage(bytes));
        }),
        (bytes) => {
          const lean = readModelInferResponse(bytes);
          if (lean === undefined) return;
          read++;
          if (Object.keys(lean.parameters).length > 0) withParameters++;
          expect(lean).toEqual(fromBinary(ModelInferResponseSchema, bytes));
        },
      ),
      { numRuns: 3000 },
    );
    expect(read).toBeGreaterThan(500);
    expect(withParameters).toBeGreaterThan(25);
    // A key that would set a plain object's prototype is left to protobuf-es.
    const key = Buffer.from("__proto__");
    // parameters (4) { key (1): "__proto__", value (2): { bool_param (1): true } }
    const hostile = Uint8Array.from([0x22, 2 + key.length + 4, 0x0a, key.length, ...key, 0x12, 2, 0x08, 1]);
    expect(readModelInferResponse(hostile)).toBeUndefined();
    // A value whose bytes go on past its one member (here into what would read as a key) is not covered.
    const overrun = Uint8Array.from([0x22, 7, 0x12, 5, 0x08, 1, 0x0a, 1, 0x6b]);
    expect(readModelInferResponse(overrun)).toBeUndefined();
    // A bool written as 2 (protobuf-es reads true) is left to protobuf-es.
    const two = Uint8Array.from([0x22, 7, 0x0a, 1, 0x6b, 0x12, 2, 0x08, 2]);
    expect(fromBinary(ModelInferResponseSchema, two).parameters.k?.parameterChoice.value).toBe(true);
    expect(readModelInferResponse(two)).toBeUndefined();
    const control = Uint8Array.from(hostile);
    control[2 + 2] = "x".charCodeAt(0);
    expect(readModelInferResponse(control)?.parameters).toEqual(
      fromBinary(ModelInferResponseSchema, control).parameters,
    );
  });

  it("reads the requests clients send, raw inputs as views", () => {
    const raw = [new Uint8Array(64).fill(1), new Uint8Array(64).fill(2)];
    const bytes = toBinary(
      ModelInferRequestSchema,
      create(ModelInferRequestSchema, {
        modelName: "simple",
        inputs: ["INPUT0", "INPUT1"].map((name) => ({ name, datatype: "INT32", shape: [1n, 16n] })),
        outputs: [{ name: "OUTPUT0" }],
        rawInputContents: raw,
      }),
    );
    const lean = readModelInferRequest(bytes);
    expect(lean?.inputs.map(({ name, shape }) => [name, shape])).toEqual([
      ["INPUT0", [1, 16]],
      ["INPUT1", [1, 16]],
    ]);
    expect(lean?.outputs).toEqual(["OUTPUT0"]);
    expect(lean?.inputs[1]?.data.buffer).toBe(bytes.buffer);
    expect([...(lean?.inputs[1]?.data ?? [])]).toEqual([...(raw[1] ?? [])]);
    // One raw buffer short: left to the general path, which names the input without data.
    expect(readModelInferRequest(bytes.subarray(0, bytes.length - 66))).toBeUndefined();
  });
});

describe("ModelStreamInferResponse as pieces", () => {
  it("is toBinary's bytes, with and without an error message, the raw outputs passed through uncopied", () => {
    const raw = Uint8Array.from({ length: 300 }, (_, i) => i & 0xff);
    for (const init of [
      {
        errorMessage: "",
        inferResponse: {
          modelName: "m",
          outputs: [{ name: "O", datatype: "UINT8", shape: [300n] }],
          rawOutputContents: [raw],
        },
      },
      { errorMessage: "in failure — é", inferResponse: { id: "x", modelName: "m" } },
      { errorMessage: "only an error" },
    ]) {
      const message = create(ModelStreamInferResponseSchema, init);
      const { pieces, byteLength } = encodeModelStreamInferResponse(message);
      const bytes = Buffer.concat(pieces);
      expect(bytes.byteLength).toBe(byteLength);
      expect(bytes).toEqual(Buffer.from(toBinary(ModelStreamInferResponseSchema, message)));
      if (init.inferResponse?.rawOutputContents) expect(pieces.at(-1)).toBe(raw);
    }
  });
});

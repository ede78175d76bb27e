import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ModelInferRequestSchema, ModelInferResponseSchema } from "./gen/inference/grpc_service_pb.js";
import { decodeModelInferResponse, encodeModelInferRequest, encodeModelInferResponse } from "./model-infer-codec.js";

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

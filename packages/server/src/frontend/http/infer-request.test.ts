import type { IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { gzipSync } from "node:zlib";
import { create } from "@bufbuild/protobuf";
import { DataType, ModelConfigSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { InferenceError } from "../../base/errors.js";
import type { ModelView } from "../../core/inference-server.js";
import type { Body } from "../transport/http-exchange.js";
import { readBody } from "../transport/node-body.js";
import { httpStatus } from "./http-status.js";
import { atoi, decodeInfer } from "./infer-request.js";

/** A request stream that delivers `chunks`, with the given headers. */
function fakeRequest(chunks: Uint8Array[], headers: Record<string, string> = {}): IncomingMessage {
  return Object.assign(Readable.from(chunks.map((c) => Buffer.from(c))), { headers, complete: true }) as never;
}

function model(inputs: { name: string; dataType: DataType; dims: number[] }[], maxBatchSize = 0): ModelView {
  const config = create(ModelConfigSchema, {
    name: "m",
    maxBatchSize,
    input: inputs.map((i) => ({ ...i, dims: i.dims.map(BigInt) })),
  });
  return { config } as unknown as ModelView;
}

function failure(run: () => unknown): string {
  try {
    run();
  } catch (e) {
    if (e instanceof InferenceError) return `${httpStatus(e)} ${e.message}`;
    throw e;
  }
  throw new Error("expected an InferenceError");
}

const simple = model(
  [
    { name: "A", dataType: DataType.TYPE_FP32, dims: [3] },
    { name: "B", dataType: DataType.TYPE_FP32, dims: [3] },
  ],
  8,
);

describe("receiving a body into one buffer", () => {
  it("places the body after the requested offset, copying each chunk once into place", async () => {
    const body = await readBody(fakeRequest([new Uint8Array([1, 2]), new Uint8Array([3])], { "content-length": "3" }), {
      limit: 100,
      encoding: "identity",
      offset: 5,
    });
    expect(body.offset).toBe(5);
    expect(body.buffer.byteLength).toBe(8);
    expect([...body.bytes]).toEqual([1, 2, 3]);
    expect(body.bytes.buffer).toBe(body.buffer);
  });

  it("collects chunked and compressed bodies, then copies them once", async () => {
    const chunked = await readBody(fakeRequest([new Uint8Array([1]), new Uint8Array([2])]), {
      limit: 100,
      encoding: "identity",
      offset: 3,
    });
    expect([chunked.buffer.byteLength, ...chunked.bytes]).toEqual([5, 1, 2]);
    const zipped = await readBody(fakeRequest([gzipSync(Buffer.from("hello"))]), { limit: 100, encoding: "gzip" });
    expect(Buffer.from(zipped.bytes).toString()).toBe("hello");
  });

  it("refuses bodies over the limit, declared or received, and empty compressed bodies", async () => {
    const message = new InferenceError("INPUT_SIZE_EXCEEDED", { size: 8, limit: 4 }).message;
    await expect(
      readBody(fakeRequest([new Uint8Array(8)], { "content-length": "8" }), { limit: 4, encoding: "identity" }),
    ).rejects.toThrow(message);
    await expect(readBody(fakeRequest([new Uint8Array(8)]), { limit: 4, encoding: "identity" })).rejects.toThrow(
      message,
    );
    const zipped = gzipSync(Buffer.alloc(100));
    await expect(readBody(fakeRequest([zipped]), { limit: 4, encoding: "gzip" })).rejects.toThrow(
      new InferenceError("INPUT_SIZE_EXCEEDED", { size: zipped.length, limit: 4 }).message,
    );
    await expect(readBody(fakeRequest([]), { limit: 4, encoding: "deflate" })).rejects.toThrow(
      "nothing to be decompressed",
    );
  });
});

describe("decoding an inference body", () => {
  it("makes binary inputs movable views of the body buffer, the first one 8-byte aligned", async () => {
    const header = Buffer.from(
      JSON.stringify({
        inputs: [
          { name: "A", shape: [1, 3], datatype: "FP32", parameters: { binary_data_size: 12 } },
          { name: "B", shape: [1, 3], datatype: "FP32", parameters: { binary_data_size: 12 } },
        ],
      }),
    );
    const a = new Uint8Array(Float32Array.from([1, 2, 3]).buffer);
    const b = new Uint8Array(Float32Array.from([4, 5, 6]).buffer);
    const offset = (8 - (header.length % 8)) % 8;
    const body = await readBody(fakeRequest([header, a, b], { "content-length": String(header.length + 24) }), {
      limit: 1000,
      encoding: "identity",
      offset,
    });
    const { request } = decodeInfer(body, String(header.length), simple, "m", "");
    const [ta, tb] = request.inputs;
    expect(ta?.data.buffer).toBe(body.buffer);
    expect(tb?.data.buffer).toBe(body.buffer);
    expect((ta?.data.byteOffset ?? 1) % 8).toBe(0);
    expect(ta?.movable && tb?.movable).toBe(true);
    expect([...new Float32Array(body.buffer, ta?.data.byteOffset, 3)]).toEqual([1, 2, 3]);
    expect([...new Float32Array(body.buffer, tb?.data.byteOffset, 3)]).toEqual([4, 5, 6]);
  });

  it("reads request parameters with Triton's types", () => {
    const body = bodyOf(
      `{"inputs":[],"parameters":{"sequence_id":18446744073709551615,"sequence_start":true,"priority":2,"timeout":100,"binary_data_output":true,"s":"x","i":5,"d":2.5,"big":8589934592,"b":false}}`,
    );
    const { request, plan } = decodeInfer(body, undefined, simple, "m", "");
    expect(request.parameters).toEqual({
      sequence_id: 2n ** 64n - 1n,
      sequence_start: true,
      priority: 2n,
      timeout: 100n,
      s: "x",
      i: 5n,
      d: 2.5,
      big: 8589934592,
      b: false,
    });
    expect(plan.binaryByDefault).toBe(true);
    const named = decodeInfer(bodyOf('{"inputs":[],"parameters":{"sequence_id":"abc"}}'), undefined, simple, "m", "");
    expect(named.request.parameters.sequence_id).toBe("abc");
  });

  it("deduces raw inputs: batch 1, one variable dimension, BYTES with a length prefix", () => {
    const variable = model([{ name: "X", dataType: DataType.TYPE_FP32, dims: [-1, 2] }], 4);
    const raw = decodeInfer(bodyOf(new Uint8Array(24)), "0", variable, "m", "");
    expect(raw.request.inputs[0]?.shape).toEqual([1, 3, 2]);
    expect(raw.plan.binaryByDefault).toBe(true);
    const rawSize = new InferenceError("RAW_SIZE", { input: "X", size: 20, shape: "[1,-1,2]" });
    expect(failure(() => decodeInfer(bodyOf(new Uint8Array(20)), "0", variable, "m", ""))).toBe(
      `${httpStatus(rawSize)} ${rawSize.message}`,
    );
    const two = model([{ name: "X", dataType: DataType.TYPE_FP32, dims: [-1, -1] }]);
    expect(failure(() => decodeInfer(bodyOf(new Uint8Array(8)), "0", two, "m", ""))).toBe(
      "400 The shape of the raw input 'X' can not be deduced because there are more than one variable-sized dimension",
    );
    const text = model([{ name: "T", dataType: DataType.TYPE_STRING, dims: [1] }]);
    const withRoom: Body = { buffer: new ArrayBuffer(7), offset: 4, bytes: new Uint8Array(0) };
    withRoom.bytes = new Uint8Array(withRoom.buffer, 4, 3);
    withRoom.bytes.set([0x61, 0x62, 0x63]);
    const bytes = decodeInfer(withRoom, "0", text, "m", "").request.inputs[0];
    expect(bytes?.data.buffer).toBe(withRoom.buffer);
    expect([...(bytes?.data ?? [])]).toEqual([3, 0, 0, 0, 0x61, 0x62, 0x63]);
    expect(bytes?.shape).toEqual([1]);
  });

  it("reads Inference-Header-Content-Length as C's atoi", () => {
    expect([atoi("12"), atoi(" 7x"), atoi("abc"), atoi("-3"), atoi("")]).toEqual([12, 7, 0, -3, 0]);
    expect(failure(() => decodeInfer(bodyOf("{}"), "-1", simple, "m", ""))).toBe(
      "400 inference header size should be in range (0, 2), got: -1",
    );
  });
});

function bodyOf(content: string | Uint8Array): Body {
  const bytes = typeof content === "string" ? new Uint8Array(Buffer.from(content)) : content;
  const buffer = new ArrayBuffer(bytes.length);
  new Uint8Array(buffer).set(bytes);
  return { buffer, offset: 0, bytes: new Uint8Array(buffer) };
}

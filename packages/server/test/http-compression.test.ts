import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  binaryBody,
  type HttpServer,
  int32Bytes,
  type Output,
  readInt32,
  SIXTEEN,
  send,
  simpleInputs,
  startHttp,
} from "./http-fixture.js";

let h: HttpServer;
const sum = SIXTEEN.map((v) => 2 * v);

beforeAll(async () => {
  h = await startHttp();
});
afterAll(async () => {
  await h.close();
});

describe("REST inference: compression", () => {
  const body = JSON.stringify({ inputs: simpleInputs() });

  it("reads gzip and deflate (zlib) request bodies", async () => {
    const { deflateSync } = await import("node:zlib");
    for (const [encoding, data] of [
      ["gzip", gzipSync(body)],
      ["deflate", deflateSync(body)],
    ] as const) {
      const r = await send(h.port, "POST", "/v2/models/simple/infer", data, { "Content-Encoding": encoding });
      expect(r.status, encoding).toBe(200);
      expect((r.json() as { outputs: Output[] }).outputs[0]?.data).toEqual(sum);
    }
  });

  it("reads a compressed binary body, the header length counting decompressed bytes", async () => {
    const { body: plain, headerLength } = binaryBody(
      {
        inputs: [
          { name: "INPUT0", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } },
          { name: "INPUT1", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } },
        ],
      },
      [int32Bytes(SIXTEEN), int32Bytes(SIXTEEN)],
    );
    const r = await send(h.port, "POST", "/v2/models/simple/infer", gzipSync(plain), {
      "Content-Encoding": "gzip",
      "Inference-Header-Content-Length": String(headerLength),
    });
    expect(r.status).toBe(200);
    expect((r.json() as { outputs: Output[] }).outputs[0]?.data).toEqual(sum);
  });

  it("answers other request encodings 501 with Accept-Encoding", async () => {
    const r = await send(h.port, "POST", "/v2/models/simple/infer", body, { "Content-Encoding": "br" });
    expect([r.status, r.text]).toEqual([501, '{"error":"Unsupported compression type"}']);
    expect(r.headers["accept-encoding"]).toBe("gzip, deflate");
  });

  it("compresses replies as Accept-Encoding asks (highest q, first on a tie)", async () => {
    const { gunzipSync, inflateSync } = await import("node:zlib");
    const cases: [string, string | undefined][] = [
      ["gzip", "gzip"],
      ["deflate, gzip", "deflate"],
      ["gzip;q=0.5, deflate;q=0.8", "deflate"],
      ["identity, gzip", undefined],
      ["gzip;q=0, br", undefined],
      ["br, *", undefined],
    ];
    for (const [accept, expected] of cases) {
      const r = await send(h.port, "POST", "/v2/models/simple/infer", body, { "Accept-Encoding": accept });
      expect(r.headers["content-encoding"], accept).toBe(expected);
      const plain = expected === "gzip" ? gunzipSync(r.body) : expected === "deflate" ? inflateSync(r.body) : r.body;
      expect((JSON.parse(plain.toString()) as { outputs: Output[] }).outputs[0]?.data).toEqual(sum);
    }
  });

  it("keeps Inference-Header-Content-Length uncompressed for binary replies", async () => {
    const { gunzipSync } = await import("node:zlib");
    const r = await send(
      h.port,
      "POST",
      "/v2/models/simple/infer",
      JSON.stringify({ inputs: simpleInputs(), parameters: { binary_data_output: true } }),
      { "Accept-Encoding": "gzip" },
    );
    const plain = gunzipSync(r.body);
    const length = Number(r.headers["inference-header-content-length"]);
    expect(JSON.parse(plain.subarray(0, length).toString()).model_name).toBe("simple");
    expect(readInt32(plain.subarray(length, length + 64))).toEqual(sum);
  });
});

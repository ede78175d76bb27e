import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InferenceError } from "../src/base/errors.js";
import {
  type HttpServer,
  int32Bytes,
  postBinary,
  postJson,
  SIXTEEN,
  send,
  simpleInputs,
  splitBinary,
  startHttp,
} from "./http-fixture.js";

let h: HttpServer;
const infer = (model: string, body: unknown, headers: Record<string, string> = {}) =>
  postJson(h.port, `/v2/models/${model}/infer`, body, headers);

beforeAll(async () => {
  h = await startHttp();
});
afterAll(async () => {
  await h.close();
});

describe("REST inference: errors", () => {
  const cases: [string, unknown, number, string][] = [
    ["malformed JSON", "{", 500, "failed to parse the request JSON buffer: Missing a name for object member. at 1"],
    ["no inputs", {}, 500, "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"],
    ["non-string id", { id: 1, inputs: [] }, 500, "Unable to parse 'id': attempt to access JSON non-string as string"],
    [
      "negative shape",
      { inputs: [{ name: "INPUT0", shape: [-1, 16], datatype: "INT32", data: SIXTEEN }] },
      500,
      "Unable to parse 'shape': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ],
    [
      "too few elements",
      { inputs: [{ name: "INPUT0", shape: [1, 16], datatype: "INT32", data: [1, 2] }] },
      500,
      "Failed to parse 'data' field: shape does not match true shape",
    ],
    [
      "too many elements",
      { inputs: [{ name: "INPUT0", shape: [1, 2], datatype: "INT32", data: [1, 2, 3] }] },
      500,
      "Unable to parse 'data': Shape does not match true shape of 'data' field",
    ],
    [
      "a float for INT32",
      { inputs: [{ name: "INPUT0", shape: [1, 2], datatype: "INT32", data: [1, 2.5] }] },
      500,
      "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer",
    ],
    [
      "data not an array",
      { inputs: [{ name: "INPUT0", shape: [1, 1], datatype: "INT32", data: 1 }] },
      500,
      "Unable to parse 'data': attempt to access JSON non-array as array",
    ],
    [
      "no data",
      { inputs: [{ name: "INPUT0", shape: [1, 16], datatype: "INT32" }] },
      400,
      "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But no field is set",
    ],
    [
      "data and binary_data_size",
      { inputs: [{ name: "INPUT0", shape: [1], datatype: "INT32", data: [1], parameters: { binary_data_size: 4 } }] },
      400,
      "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', 'shared_memory_region' in 'parameters'. But set 'data' 'binary_data_size'",
    ],
    [
      "FP16 as JSON",
      { inputs: [{ name: "INPUT0", shape: [1, 1], datatype: "FP16", data: [1] }] },
      400,
      "receiving FP16 data via JSON is not supported. Please use the binary data format for input INPUT0",
    ],
    [
      "binary data without the header",
      { inputs: [{ name: "INPUT0", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } }] },
      400,
      "must specify valid 'Infer-Header-Content-Length' in request header and 'binary_data_size' when passing inputs in binary data format",
    ],
    [
      "a triton_ parameter",
      { inputs: simpleInputs(), parameters: { triton_x: 1 } },
      400,
      "parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified.",
    ],
    [
      "a string priority",
      { inputs: simpleInputs(), parameters: { priority: "high" } },
      500,
      "Unable to parse 'priority': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ],
    [
      "an array parameter",
      { inputs: simpleInputs(), parameters: { custom: [1] } },
      400,
      "parameter 'custom' has invalid type. It should be either 'int', 'bool', or 'string'.",
    ],
    [
      "a non-uint classification",
      { inputs: simpleInputs(), outputs: [{ name: "OUTPUT0", parameters: { classification: -1 } }] },
      500,
      "Unable to set 'classification': attempt to access JSON non-unsigned-integer as unsigned-integer",
    ],
    [
      "a non-bool binary_data",
      { inputs: simpleInputs(), outputs: [{ name: "OUTPUT0", parameters: { binary_data: 1 } }] },
      500,
      "Unable to parse 'binary_data': attempt to access JSON non-boolean as boolean",
    ],
    [
      "an unknown input",
      { id: "7", inputs: [...simpleInputs(), { name: "INPUT9", shape: [1], datatype: "INT32", data: [1] }] },
      400,
      "[request id: 7] unexpected inference input 'INPUT9' for model 'simple'",
    ],
    [
      "a missing input",
      { inputs: simpleInputs().slice(0, 1) },
      400,
      "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    ],
    [
      "a wrong datatype",
      { inputs: [{ name: "INPUT0", shape: [1, 16], datatype: "FP32", data: SIXTEEN }, simpleInputs()[1]] },
      400,
      "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
    ],
    [
      "an unknown output",
      { inputs: simpleInputs(), outputs: [{ name: "OUTPUT9" }] },
      400,
      "[request id: <id_unknown>] unexpected inference output 'OUTPUT9' for model 'simple'",
    ],
    [
      "shared memory",
      {
        inputs: [
          {
            name: "INPUT0",
            shape: [1, 16],
            datatype: "INT32",
            parameters: { shared_memory_region: "r", shared_memory_byte_size: 64 },
          },
        ],
      },
      501,
      new InferenceError("SHM_DISABLED").message,
    ],
  ];
  for (const [what, body, status, message] of cases) {
    it(`answers ${what} with ${status}`, async () => {
      const r = await infer("simple", body);
      expect(r.status).toBe(status);
      expect(r.headers["content-type"]).toBe("application/json");
      expect(r.text).toBe(JSON.stringify({ error: message }));
    });
  }

  it("treats a shape with a zero dimension as empty, however large the others", async () => {
    // 17 dimensions of 2^64-1 multiply past the largest double.
    const huge = `${"18446744073709551615,".repeat(17)}0`;
    const input1 = JSON.stringify(simpleInputs()[1]);
    const r = await infer(
      "simple",
      `{"inputs":[{"name":"INPUT0","shape":[${huge}],"datatype":"INT32","data":[]},${input1}]}`,
    );
    expect(r.status).toBe(400);
    expect(r.text).toContain("unexpected shape for input 'INPUT0' for model 'simple'");
  });

  it("answers unknown models and versions 404 before reading the body", async () => {
    const model = await infer("nope", "not json");
    expect([model.status, model.text]).toEqual([404, `{"error":"Request for unknown model: 'nope' is not found"}`]);
    const version = await infer("simple/versions/3", "not json");
    expect(version.text).toBe(`{"error":"Request for unknown model: 'simple' version 3 is not found"}`);
  });

  it("answers binary-size errors", async () => {
    const header = {
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } },
        { name: "INPUT1", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } },
      ],
    };
    const short = await postBinary(h.port, "/v2/models/simple/infer", header, [
      int32Bytes(SIXTEEN),
      new Uint8Array(10),
    ]);
    expect([short.status, short.text]).toEqual([
      400,
      `{"error":"unexpected size for input 'INPUT1', expecting 54 additional bytes for model 'simple'"}`,
    ]);
    const extra = await postBinary(h.port, "/v2/models/simple/infer", header, [
      int32Bytes(SIXTEEN),
      int32Bytes(SIXTEEN),
      new Uint8Array(1),
    ]);
    expect([extra.status, extra.text]).toEqual([
      400,
      `{"error":"unexpected additional input data for model 'simple'"}`,
    ]);
    const range = await send(h.port, "POST", "/v2/models/simple/infer", "{}", {
      "Inference-Header-Content-Length": "9",
    });
    expect([range.status, range.text]).toEqual([
      400,
      `{"error":"inference header size should be in range (0, 2), got: 9"}`,
    ]);
  });

  it("applies --http-max-input-size as Triton does: the JSON, JSON and raw input data, decompressed bodies; not binary data", async () => {
    const small = await startHttp({ http: { maxInputSize: 2048 } });
    const limited = (text: string) => `${text} Use --http-max-input-size to increase the limit.`;
    try {
      const big = await send(small.port, "POST", "/v2/models/simple/infer", Buffer.alloc(8192, 0x20));
      expect([big.status, big.json()]).toEqual([
        400,
        { error: limited("request JSON size of 8192 bytes exceeds the maximum allowed input size of 2048 bytes.") },
      ]);
      const bomb = gzipSync(Buffer.alloc(1 << 20, 0x20));
      expect(bomb.length).toBeLessThan(2048);
      const zipped = await send(small.port, "POST", "/v2/models/simple/infer", bomb, { "Content-Encoding": "gzip" });
      expect([zipped.status, zipped.json()]).toEqual([
        400,
        { error: limited("Decompressed data size exceeds the maximum allowed value of 2048 bytes.") },
      ]);
      // Sized from the shape before the data is read.
      const json = await send(
        small.port,
        "POST",
        "/v2/models/simple/infer",
        JSON.stringify({ inputs: [{ name: "INPUT0", shape: [1, 1000], datatype: "INT32", data: [0] }] }),
      );
      expect([json.status, json.json()]).toEqual([
        400,
        {
          error: limited(
            "JSON input 'INPUT0' has a byte_size (4000 bytes) that exceeds the maximum allowed value of 2048 bytes.",
          ),
        },
      ]);
      const raw = await send(small.port, "POST", "/v2/models/mlp_classifier/infer", Buffer.alloc(4096), {
        "Inference-Header-Content-Length": "0",
      });
      expect([raw.status, raw.json()]).toEqual([
        400,
        {
          error: limited(
            "Raw input has a byte_size (4096 bytes) that exceeds the maximum allowed value of 2048 bytes.",
          ),
        },
      ]);
      // 64 KiB of binary tensor data after a small JSON header reaches the model, as in Triton.
      const element = Buffer.alloc(65536, 0x61);
      const length = Buffer.alloc(4);
      length.writeUInt32LE(element.length);
      const binary = await postBinary(
        small.port,
        "/v2/models/simple_identity/infer",
        {
          inputs: [{ name: "INPUT0", shape: [1, 1], datatype: "BYTES", parameters: { binary_data_size: 65540 } }],
          outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
        },
        [length, element],
      );
      expect(binary.status).toBe(200);
      expect(splitBinary(binary).rest.subarray(4).equals(element)).toBe(true);
      const ok = await send(small.port, "POST", "/v2/models/simple/infer", JSON.stringify({ inputs: simpleInputs() }));
      expect(ok.status).toBe(200);
    } finally {
      await small.close();
    }
  });

  it("bounds an inference body as received by --http-max-body-size (Galley's own)", async () => {
    const small = await startHttp({ http: { maxInputSize: 1024, maxBodySize: 4096 } });
    try {
      const header = {
        inputs: [{ name: "INPUT0", shape: [1, 1], datatype: "BYTES", parameters: { binary_data_size: 8196 } }],
      };
      const length = Buffer.alloc(4);
      length.writeUInt32LE(8192);
      const over = await postBinary(small.port, "/v2/models/simple_identity/infer", header, [
        length,
        Buffer.alloc(8192),
      ]);
      expect(over.status).toBe(400);
      expect(over.json()).toEqual({
        error: expect.stringMatching(
          /^request body of \d+ bytes exceeds the maximum body size of 4096 bytes\. Use --http-max-body-size to increase the limit\.$/,
        ),
      });
    } finally {
      await small.close();
    }
  });
});

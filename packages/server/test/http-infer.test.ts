import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  bytesTensor,
  EXAMPLES,
  fp32Bytes,
  type HttpServer,
  int32Bytes,
  type Output,
  postBinary,
  postJson,
  readBytesTensor,
  readFp32,
  readInt32,
  SIXTEEN,
  send,
  simpleInputs,
  splitBinary,
  startHttp,
} from "./http-fixture.js";

let h: HttpServer;
const infer = (model: string, body: unknown, headers: Record<string, string> = {}) =>
  postJson(h.port, `/v2/models/${model}/infer`, body, headers);
const sum = SIXTEEN.map((v) => 2 * v);
const zeros = SIXTEEN.map(() => 0);
const mlpInput = Array.from({ length: 64 }, (_, i) => Math.sin(i) * 3);
const labels = readFileSync(join(EXAMPLES, "mlp_classifier", "labels.txt"), "utf8").split("\n");

beforeAll(async () => {
  h = await startHttp();
});
afterAll(async () => {
  await h.close();
});

describe("REST inference: JSON tensors", () => {
  it("answers with Triton's key order, flat data, and the id only when given", async () => {
    const r = await infer("simple", { id: "req-1", inputs: simpleInputs() });
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/json");
    expect(r.text).toBe(
      `{"id":"req-1","model_name":"simple","model_version":"1","outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[1,16],"data":[${sum}]},{"name":"OUTPUT1","datatype":"INT32","shape":[1,16],"data":[${zeros}]}]}`,
    );
    const anonymous = await infer("simple", { id: "", inputs: simpleInputs() });
    expect(anonymous.text.startsWith('{"model_name":"simple","model_version":"1","outputs":')).toBe(true);
  });

  it("reads nested data row-major and returns the requested outputs in request order", async () => {
    const nested = [[SIXTEEN.slice(0, 8), SIXTEEN.slice(8)]];
    const r = await infer("simple/versions/1", {
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: nested },
        { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: SIXTEEN.map(() => 1) },
      ],
      outputs: [{ name: "OUTPUT1" }, { name: "OUTPUT0" }],
    });
    const outputs = (r.json() as { outputs: Output[] }).outputs;
    expect(outputs.map((o) => o.name)).toEqual(["OUTPUT1", "OUTPUT0"]);
    expect(outputs[0]?.data).toEqual(SIXTEEN.map((v) => v - 1));
    expect(outputs[1]?.data).toEqual(SIXTEEN.map((v) => v + 1));
  });

  it("truncates integers to the type's width (INT8 wraps)", async () => {
    const r = await infer("simple_int8", {
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "INT8", data: SIXTEEN.map(() => 100) },
        { name: "INPUT1", shape: [1, 16], datatype: "INT8", data: SIXTEEN.map(() => 300) },
      ],
    });
    const [out0, out1] = (r.json() as { outputs: Output[] }).outputs;
    // 300 is 44 as int8: 100 + 44 = 144 wraps to -112; 100 - 44 = 56.
    expect(out0?.data).toEqual(SIXTEEN.map(() => -112));
    expect(out1?.data).toEqual(SIXTEEN.map(() => 56));
  });

  it("carries BYTES as UTF-8 JSON strings both ways, NUL and non-ASCII included", async () => {
    // (No NUL here: ONNX Runtime string tensors end at a NUL; the JSON side is unit-tested.)
    const words = ["héllo", "wörld", "a/b", '"quoted"\\', "tab\t", "\u0001", "日本"];
    const r = await infer("simple_identity", {
      inputs: [{ name: "INPUT0", shape: [1, words.length], datatype: "BYTES", data: words }],
    });
    expect(r.status).toBe(200);
    const output = (JSON.parse(r.body.toString("utf8")) as { outputs: Output[] }).outputs[0];
    expect(output).toMatchObject({ datatype: "BYTES", shape: [1, words.length], data: words });
    // rapidjson's escaping: upper-case \u escapes, '/' and non-ASCII left alone.
    expect(r.body.toString("utf8")).toContain('"a/b","\\"quoted\\"\\\\","tab\\t","\\u0001","日本"');
    const strings = await infer("simple_string", {
      inputs: [
        { name: "INPUT0", shape: [1, 16], datatype: "BYTES", data: SIXTEEN.map(String) },
        { name: "INPUT1", shape: [1, 16], datatype: "BYTES", data: SIXTEEN.map(() => "3") },
      ],
    });
    expect((strings.json() as { outputs: Output[] }).outputs[1]?.data).toEqual(SIXTEEN.map((v) => String(v - 3)));
  });

  it("prints FP32 as the shortest round-trip double of the float value", async () => {
    const json = await infer("mlp_classifier", {
      inputs: [{ name: "INPUT", shape: [1, 64], datatype: "FP32", data: mlpInput }],
    });
    const binary = await infer("mlp_classifier", {
      inputs: [{ name: "INPUT", shape: [1, 64], datatype: "FP32", data: mlpInput }],
      parameters: { binary_data_output: true },
    });
    const floats = readFp32(splitBinary(binary).rest);
    const text = /"data":\[([^\]]*)\]/.exec(json.text)?.[1] ?? "";
    expect(text.split(",")).toEqual(floats.map((f) => shortestDouble(f)));
    expect(text).not.toMatch(/e\+/);
  });

  it("applies the classification extension with labels", async () => {
    const r = await infer("mlp_classifier", {
      inputs: [{ name: "INPUT", shape: [2, 64], datatype: "FP32", data: [...mlpInput, ...mlpInput.map((v) => -v)] }],
      outputs: [{ name: "PROBABILITIES", parameters: { classification: 3 } }],
    });
    const probabilities = await infer("mlp_classifier", {
      inputs: [{ name: "INPUT", shape: [1, 64], datatype: "FP32", data: mlpInput }],
    });
    const values = (probabilities.json() as { outputs: Output[] }).outputs[0]?.data as number[];
    const top = values
      .map((v, i) => [v, i] as const)
      .sort((a, b) => b[0] - a[0])
      .slice(0, 3);
    const output = (r.json() as { outputs: Output[] }).outputs[0];
    expect(output?.datatype).toBe("BYTES");
    expect(output?.shape).toEqual([2, 3]);
    expect(output?.data?.slice(0, 3)).toEqual(top.map(([v, i]) => `${v.toFixed(6)}:${i}:${labels[i]}`));
    // classification 0 means no classification.
    const none = await infer("mlp_classifier", {
      inputs: [{ name: "INPUT", shape: [1, 64], datatype: "FP32", data: mlpInput }],
      outputs: [{ name: "PROBABILITIES", parameters: { classification: 0 } }],
    });
    expect((none.json() as { outputs: Output[] }).outputs[0]?.datatype).toBe("FP32");
  });
});

/** rapidjson's layout of the shortest round-trip digits (the values here are all in 1e-6..1). */
function shortestDouble(value: number): string {
  const s = String(value);
  return s.includes(".") || s.includes("e") ? s : `${s}.0`;
}

describe("REST inference: binary tensor extension", () => {
  it("mixes binary and JSON inputs and outputs", async () => {
    const r = await postBinary(
      h.port,
      "/v2/models/simple/infer",
      {
        inputs: [
          { name: "INPUT0", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } },
          { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: SIXTEEN.map(() => 2) },
        ],
        outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }, { name: "OUTPUT1" }],
      },
      [int32Bytes(SIXTEEN)],
    );
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/octet-stream");
    const { header, rest } = splitBinary(r);
    expect(header.outputs).toEqual([
      { name: "OUTPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: SIXTEEN.map((v) => v - 2) },
    ]);
    expect(readInt32(rest)).toEqual(SIXTEEN.map((v) => v + 2));
    expect(Number(r.headers["content-length"])).toBe(r.body.length);
  });

  it("sends every output binary with binary_data_output, except listed ones without binary_data", async () => {
    const all = await postBinary(
      h.port,
      "/v2/models/simple/infer",
      {
        inputs: [
          { name: "INPUT0", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } },
          { name: "INPUT1", shape: [1, 16], datatype: "INT32", parameters: { binary_data_size: 64 } },
        ],
        parameters: { binary_data_output: true },
      },
      [int32Bytes(SIXTEEN), int32Bytes(SIXTEEN)],
    );
    const { header, rest } = splitBinary(all);
    expect(header.outputs.map((o) => o.parameters?.binary_data_size)).toEqual([64, 64]);
    expect(readInt32(rest.subarray(0, 64))).toEqual(sum);
    expect(readInt32(rest.subarray(64))).toEqual(zeros);

    const quirk = await infer("simple", {
      inputs: simpleInputs(),
      outputs: [{ name: "OUTPUT0" }],
      parameters: { binary_data_output: true },
    });
    expect(quirk.headers["content-type"]).toBe("application/json");
    expect((quirk.json() as { outputs: Output[] }).outputs[0]?.data).toEqual(sum);
  });

  it("carries BYTES in binary form", async () => {
    const words = ["one", "", "three"];
    const r = await postBinary(
      h.port,
      "/v2/models/simple_identity/infer",
      {
        inputs: [{ name: "INPUT0", shape: [1, 3], datatype: "BYTES", parameters: { binary_data_size: 20 } }],
        outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
      },
      [bytesTensor(words)],
    );
    const { header, rest } = splitBinary(r);
    expect(header.outputs[0]?.parameters?.binary_data_size).toBe(20);
    expect(readBytesTensor(rest)).toEqual(words);
  });

  it("takes a raw binary body for a single-input model and answers every output binary", async () => {
    const r = await send(h.port, "POST", "/v2/models/mlp_classifier/infer", fp32Bytes(mlpInput), {
      "Inference-Header-Content-Length": "0",
    });
    expect(r.status).toBe(200);
    const { header, rest } = splitBinary(r);
    expect(header.outputs).toEqual([
      { name: "PROBABILITIES", datatype: "FP32", shape: [1, 10], parameters: { binary_data_size: 40 } },
    ]);
    const json = await infer("mlp_classifier", {
      inputs: [{ name: "INPUT", shape: [1, 64], datatype: "FP32", data: mlpInput }],
    });
    expect(readFp32(rest)).toEqual((json.json() as { outputs: Output[] }).outputs[0]?.data);
  });

  it("answers Triton's raw-request errors", async () => {
    const raw = (model: string, body: Uint8Array) =>
      send(h.port, "POST", `/v2/models/${model}/infer`, body, { "Inference-Header-Content-Length": "0" });
    const many = await raw("simple", int32Bytes(SIXTEEN));
    expect([many.status, many.text]).toEqual([
      400,
      `{"error":"Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in 'simple' model configuration"}`,
    ]);
    const bytes = await raw("simple_identity", Buffer.from("hello"));
    expect([bytes.status, bytes.text]).toEqual([
      400,
      `{"error":"For BYTE datatype raw input 'INPUT0', the model must have input shape [1]"}`,
    ]);
    const short = await raw("mlp_classifier", fp32Bytes([1, 2, 3]));
    expect(short.status).toBe(400);
    expect(short.text).toContain("input byte size mismatch for input 'INPUT' for model 'mlp_classifier'");
  });
});

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  EXAMPLES,
  type HttpServer,
  type Output,
  postJson,
  removeTempRepositories,
  SIXTEEN,
  send,
  startHttp,
  tempRepository,
} from "./http-fixture.js";

let h: HttpServer;
let repo: string;
const post = (path: string, body?: unknown) =>
  body === undefined ? send(h.port, "POST", path) : postJson(h.port, path, body);
const index = async (body?: unknown) => (await post("/v2/repository/index", body)).json();
const inferSimple = (model: string) =>
  postJson(h.port, `/v2/models/${model}/infer`, {
    inputs: [
      { name: "INPUT0", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
      { name: "INPUT1", shape: [1, 16], datatype: "INT32", data: SIXTEEN },
    ],
  });

beforeAll(async () => {
  repo = tempRepository(["simple", "mlp_classifier"]);
  h = await startHttp({ modelRepositories: [repo], controlMode: "explicit" });
});
afterAll(async () => {
  await h.close();
  removeTempRepositories();
});

describe("REST model repository extension (explicit control)", () => {
  it("lists never-loaded models by name only, and accepts an empty body or a repository name", async () => {
    expect(await index()).toEqual([{ name: "mlp_classifier" }, { name: "simple" }]);
    expect(await index("")).toEqual([{ name: "mlp_classifier" }, { name: "simple" }]);
    const named = await send(h.port, "POST", "/v2/repository/anything/index", "{}");
    expect(named.status).toBe(200);
    expect(await index({ ready: true })).toEqual([]);
  });

  it("answers a non-bool ready 400 and malformed JSON 500", async () => {
    const bad = await post("/v2/repository/index", { ready: "yes" });
    expect([bad.status, bad.text]).toEqual([400, `{"error":"Invalid value for 'ready': expected a boolean"}`]);
    const malformed = await send(h.port, "POST", "/v2/repository/index", "{]");
    expect(malformed.status).toBe(500);
    expect(malformed.text).toContain("failed to parse the request JSON buffer: ");
  });

  it("loads, serves, unloads (reason 'unloaded') and reloads a model", async () => {
    const load = await post("/v2/repository/models/simple/load");
    expect([load.status, load.text]).toEqual([200, ""]);
    expect(await index({ ready: true })).toEqual([{ name: "simple", version: "1", state: "READY" }]);
    expect((await inferSimple("simple")).status).toBe(200);

    const unload = await post("/v2/repository/models/simple/unload", { parameters: { unload_dependents: false } });
    expect(unload.status).toBe(200);
    expect(await index()).toEqual([
      { name: "mlp_classifier" },
      { name: "simple", version: "1", state: "UNAVAILABLE", reason: "unloaded" },
    ]);
    const ready = await send(h.port, "GET", "/v2/models/simple/ready");
    expect([ready.status, ready.text]).toEqual([400, '{"error":"Model version not ready"}']);
    const gone = await inferSimple("simple");
    expect([gone.status, gone.text]).toEqual([
      404,
      `{"error":"Request for unknown model: 'simple' has no available versions"}`,
    ]);
    const stats = await send(h.port, "GET", "/v2/models/simple/stats");
    expect([stats.status, stats.text]).toEqual([400, `{"error":"requested model 'simple' is not available"}`]);

    // A body that cannot be read is ignored on unload, as in Triton.
    expect((await post("/v2/repository/models/simple/load")).status).toBe(200);
    expect((await send(h.port, "POST", "/v2/repository/models/simple/unload", "not json")).status).toBe(200);
    expect((await post("/v2/repository/models/simple/load", {})).status).toBe(200);
  });

  it("reports statistics as Triton's JSON, with the counts after inferences", async () => {
    for (let i = 0; i < 3; i++) expect((await inferSimple("simple")).status).toBe(200);
    const r = await send(h.port, "GET", "/v2/models/simple/stats");
    expect(r.status).toBe(200);
    expect(r.text).toMatch(
      /^\{"model_stats":\[\{"name":"simple","version":"1","last_inference":\d+,"inference_count":3,"execution_count":[123],"inference_stats":\{"success":\{"count":3,"ns":\d+\},"fail":\{"count":0,"ns":0\},"queue":\{"count":3,"ns":\d+\},"compute_input":\{"count":[123],"ns":\d+\},"compute_infer":/,
    );
    const stats = r.json() as { model_stats: Record<string, unknown>[] };
    expect(Object.keys(stats.model_stats[0] ?? {})).toEqual([
      "name",
      "version",
      "last_inference",
      "inference_count",
      "execution_count",
      "inference_stats",
      "response_stats",
      "batch_stats",
      "memory_usage",
    ]);
    // memory_usage: Triton's field for what a model holds; Galley fills it with the host memory measured at load.
    expect(stats.model_stats[0]).toMatchObject({
      response_stats: {},
      memory_usage: [{ type: "CPU", id: 0, byte_size: expect.any(Number) }],
    });
    expect(stats.model_stats[0]?.batch_stats).toMatchObject([{ batch_size: 1 }]);
    const all = (await send(h.port, "GET", "/v2/models/stats")).json() as { model_stats: { name: string }[] };
    expect(all.model_stats.map((m) => m.name)).toEqual(["simple"]);
    expect((await send(h.port, "GET", "/v2/models/simple/versions/1/stats")).json()).toEqual(r.json());
  });

  it("loads with a config override", async () => {
    const config = JSON.stringify({ backend: "onnxruntime", max_batch_size: 16 });
    const load = await post("/v2/repository/models/mlp_classifier/load", { parameters: { config } });
    expect([load.status, load.text]).toEqual([200, ""]);
    const r = (await send(h.port, "GET", "/v2/models/mlp_classifier/config")).json() as Record<string, unknown>;
    expect(r.max_batch_size).toBe(16);
    expect((r.output as { label_filename: string }[])[0]?.label_filename).toBe("");
    const bad = await post("/v2/repository/models/mlp_classifier/load", { parameters: { config: '{"nonsense":1}' } });
    expect(bad.status).toBe(500);
    expect(bad.text).toContain(`failed to load 'mlp_classifier', Invalid config override`);
  });

  it("loads a model from file: overrides (base64), and refuses paths that escape", async () => {
    const model = readFileSync(join(EXAMPLES, "simple", "1", "model.onnx")).toString("base64");
    const config = JSON.stringify({ name: "copy", backend: "onnxruntime", max_batch_size: 8 });
    const load = await post("/v2/repository/models/copy/load", {
      parameters: { config, "file:1/model.onnx": model },
    });
    expect([load.status, load.text]).toEqual([200, ""]);
    const r = await inferSimple("copy");
    expect((r.json() as { outputs: Output[] }).outputs[0]?.data).toEqual(SIXTEEN.map((v) => 2 * v));
    expect(await index({ ready: true })).toContainEqual({ name: "copy", version: "1", state: "READY" });

    for (const path of ["file:../evil.onnx", "file:1/../../evil.onnx", "file:/../etc/evil"]) {
      const escaping = await post("/v2/repository/models/evil/load", { parameters: { config, [path]: model } });
      expect(escaping.status, path).toBe(400);
      expect((escaping.json() as { error: string }).error).toMatch(
        new RegExp(`^Invalid file parameter '${path}' with normalized path '.*' must stay within model directory\\.$`),
      );
    }
    const noConfig = await post("/v2/repository/models/evil/load", { parameters: { "file:1/model.onnx": model } });
    expect([noConfig.status, noConfig.text]).toEqual([
      400,
      `{"error":"Load parameter 'config' must be specified for model file override"}`,
    ]);
  });

  it("answers Triton's load errors", async () => {
    const unknown = await post("/v2/repository/models/nope/load");
    expect(unknown.status).toBe(500);
    expect(unknown.text).toBe(`{"error":"failed to load 'nope', failed to poll from model repository"}`);
    const nonString = await post("/v2/repository/models/simple/load", { parameters: { config: 1 } });
    expect([nonString.status, nonString.text]).toEqual([
      500,
      '{"error":"attempt to access JSON non-string as string"}',
    ]);
    const other = await post("/v2/repository/models/simple/load", { parameters: { other: "x" } });
    expect([other.status, other.text]).toEqual([500, '{"error":"unexpected error on creating Triton parameter"}']);
    for (const action of ["load", "unload"]) {
      const named = await post(`/v2/repository/myrepo/models/simple/${action}`);
      expect([named.status, named.text]).toEqual([501, `{"error":"'repository_name' specification is not supported"}`]);
    }
  });

  it("answers a decoupled model's infer 501", async () => {
    const config = readFileSync(join(repo, "simple", "config.pbtxt"), "utf8");
    writeFileSync(join(repo, "simple", "config.pbtxt"), `${config}\nmodel_transaction_policy { decoupled: true }\n`);
    try {
      const load = await post("/v2/repository/models/simple/load");
      expect(load.status, load.text).toBe(200);
      const r = await inferSimple("simple");
      expect([r.status, r.text]).toEqual([
        501,
        `{"error":"HTTP end point doesn't support models with decoupled transaction policy"}`,
      ]);
    } finally {
      writeFileSync(join(repo, "simple", "config.pbtxt"), config);
      await post("/v2/repository/models/simple/load");
    }
  });
});

describe("REST model repository extension (no explicit control)", () => {
  it("refuses load and unload with 503", async () => {
    const s = await startHttp();
    try {
      for (const action of ["load", "unload"]) {
        const r = await send(s.port, "POST", `/v2/repository/models/simple/${action}`);
        expect([r.status, r.text]).toEqual([
          503,
          '{"error":"explicit model load / unload is not allowed if polling is enabled"}',
        ]);
      }
      expect(((await send(s.port, "POST", "/v2/repository/index")).json() as unknown[]).length).toBe(17);
    } finally {
      await s.close();
    }
  });
});

import { Agent, request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InferenceError } from "../src/base/errors.js";
import { type HttpServer, postJson, send, startHttp } from "./http-fixture.js";

let h: HttpServer;
/** The body of a table error whose text is Galley's own (it may still change). */
const errorBody = (id: "SHM_DISABLED") => JSON.stringify({ error: new InferenceError(id).message });
const get = (path: string, headers: Record<string, string> = {}) => send(h.port, "GET", path, undefined, headers);

beforeAll(async () => {
  h = await startHttp();
});
afterAll(async () => {
  await h.close();
});

describe("REST routing (Triton's regexes)", () => {
  it("answers health live and ready with 200 and an empty body without a content type", async () => {
    for (const path of ["/v2/health/live", "/v2/health/ready"]) {
      const r = await get(path);
      expect(r.status).toBe(200);
      expect(r.text).toBe("");
      expect(r.headers["content-length"]).toBe("0");
      expect(r.headers["content-type"]).toBeUndefined();
    }
  });

  it("serves server metadata as compact JSON", async () => {
    const r = await get("/v2");
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/json");
    expect(r.text).toMatch(/^\{"name":"triton","version":"[^"]+","extensions":\["classification",/);
  });

  it("ignores the query string", async () => {
    expect((await get("/v2/health/live?test_1=1&test_2=2")).status).toBe(200);
    expect((await get("/v2/models/simple?x=1")).status).toBe(200);
  });

  it("serves model metadata, with and without a version", async () => {
    const expected =
      '{"name":"simple","versions":["1"],"platform":"onnxruntime_onnx","inputs":[{"name":"INPUT0","datatype":"INT32","shape":[-1,16]},{"name":"INPUT1","datatype":"INT32","shape":[-1,16]}],"outputs":[{"name":"OUTPUT0","datatype":"INT32","shape":[-1,16]},{"name":"OUTPUT1","datatype":"INT32","shape":[-1,16]}]}';
    expect((await get("/v2/models/simple")).text).toBe(expected);
    expect((await get("/v2/models/simple/versions/1")).text).toBe(expected);
  });

  it("answers model ready, unknown models and unknown versions as Triton does", async () => {
    const ready = await get("/v2/models/simple/ready");
    expect(ready.status).toBe(200);
    expect(ready.text).toBe("");
    expect((await get("/v2/models/simple/versions/1/ready")).status).toBe(200);
    const unknown = await get("/v2/models/nope/ready");
    expect(unknown.status).toBe(404);
    expect(unknown.text).toBe(`{"error":"Request for unknown model: 'nope' is not found"}`);
    const version = await get("/v2/models/simple/versions/7/ready");
    expect(version.status).toBe(400);
    expect(version.text).toBe('{"error":"Model version not ready"}');
    const metadata = await get("/v2/models/simple/versions/7");
    expect(metadata.status).toBe(404);
    expect(metadata.text).toBe(`{"error":"Request for unknown model: 'simple' version 7 is not found"}`);
  });

  it("serves the model config in Triton's JSON form", async () => {
    const r = await get("/v2/models/mlp_classifier/config");
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/json");
    expect(r.text).toBe(JSON.stringify(JSON.parse(r.text)));
    const config = r.json() as Record<string, unknown>;
    expect(config).toMatchObject({ name: "mlp_classifier", max_batch_size: 64, platform: "onnxruntime_onnx" });
    expect((config.input as { dims: unknown }[])[0]?.dims).toEqual([64]);
    expect((config.output as { label_filename: string }[])[0]?.label_filename).toBe("labels.txt");
    expect((await get("/v2/models/mlp_classifier/versions/1/config")).text).toBe(r.text);
  });

  it("answers paths outside the table 404 and wrong methods 405", async () => {
    for (const path of [
      "/v2/nothing",
      "/v2/models/simple/versions/abc",
      "/v2/models/simple/versions/1/trace/setting",
      "/",
    ]) {
      const r = await get(path);
      expect(r.status, path).toBe(404);
      expect(r.text).toBe('{"error":"Not Found"}');
    }
    const cases: [string, string][] = [
      ["POST", "/v2/health/live"],
      ["POST", "/v2"],
      ["GET", "/v2/models/simple/infer"],
      ["PUT", "/v2/models/simple/config"],
      ["GET", "/v2/repository/index"],
      ["GET", "/v2/repository/models/simple/load"],
      ["DELETE", "/v2/logging"],
      ["POST", "/v2/systemsharedmemory/status"],
      ["GET", "/v2/cudasharedmemory/region/r/register"],
      ["PUT", "/v2/trace/setting"],
    ];
    for (const [method, path] of cases) {
      const r = await send(h.port, method, path);
      expect(r.status, `${method} ${path}`).toBe(405);
      expect(r.text).toBe('{"error":"Method Not Allowed"}');
    }
  });

  it("answers trace settings, per model too (400 for an unknown model, as Triton)", async () => {
    for (const [method, path] of [
      ["GET", "/v2/trace/setting"],
      ["POST", "/v2/trace/setting"],
      ["GET", "/v2/models/simple/trace/setting"],
    ] as const) {
      const r = await send(h.port, method, path, method === "POST" ? "{}" : undefined);
      expect(r.status).toBe(200);
      expect(JSON.parse(r.text)).toMatchObject({ trace_level: ["OFF"], trace_rate: "1000", trace_mode: "triton" });
    }
    expect((await get("/v2/models/nope/trace/setting")).text).toBe('{"error":"Request for unknown model : nope"}');
  });

  it("answers system shared memory as a server without client shared memory", async () => {
    const status = await get("/v2/systemsharedmemory/status");
    expect([status.status, status.text]).toEqual([200, "[]"]);
    expect((await get("/v2/systemsharedmemory/region/r/status")).status).toBe(404);
    const register = await postJson(h.port, "/v2/systemsharedmemory/region/r/register", { key: "/k", byte_size: 64 });
    expect([register.status, register.text]).toEqual([501, errorBody("SHM_DISABLED")]);
    const noName = await postJson(h.port, "/v2/systemsharedmemory/register", {});
    expect([noName.status, noName.text]).toEqual([
      400,
      `{"error":"'region name' is necessary to register system shared memory region"}`,
    ]);
    expect((await send(h.port, "POST", "/v2/systemsharedmemory/unregister")).status).toBe(501);
    expect((await send(h.port, "POST", "/v2/systemsharedmemory/region/r/unregister")).status).toBe(501);
  });

  it("answers CUDA shared memory as a server without GPUs", async () => {
    const status = await get("/v2/cudasharedmemory/status");
    expect([status.status, status.text]).toEqual([200, "[]"]);
    const register = await postJson(h.port, "/v2/cudasharedmemory/region/gpu0/register", {});
    expect([register.status, register.text]).toEqual([
      400,
      `{"error":"failed to register CUDA shared memory region: 'gpu0', GPUs not supported"}`,
    ]);
    expect((await send(h.port, "POST", "/v2/cudasharedmemory/region/gpu0/unregister")).status).toBe(200);
    expect((await send(h.port, "POST", "/v2/cudasharedmemory/unregister")).status).toBe(200);
  });
});

describe("REST logging extension", () => {
  it("reports the settings and applies changes in order, ignoring nulls and unknown keys", async () => {
    const before = await get("/v2/logging");
    expect(before.text).toBe(
      '{"log_file":"","log_info":false,"log_warning":false,"log_error":false,"log_verbose_level":0,"log_format":"default"}',
    );
    const changed = await postJson(h.port, "/v2/logging", {
      log_info: null,
      log_verbose_level: 2,
      log_format: "ISO8601",
      something_else: 1,
    });
    expect(changed.status).toBe(200);
    expect(changed.json()).toMatchObject({ log_info: false, log_verbose_level: 2, log_format: "ISO8601" });
    expect((await postJson(h.port, "/v2/logging", { log_verbose_level: 0, log_format: "default" })).status).toBe(200);
  });

  it("answers Triton's errors for bad settings", async () => {
    const file = await postJson(h.port, "/v2/logging", { log_file: "/tmp/x.log" });
    expect([file.status, file.text]).toEqual([
      501,
      '{"error":"log file location can not be updated through network protocol"}',
    ]);
    const format = await postJson(h.port, "/v2/logging", { log_format: "xml" });
    expect(format.status).toBe(503);
    const type = await postJson(h.port, "/v2/logging", { log_info: "yes" });
    expect([type.status, type.text]).toEqual([500, '{"error":"attempt to access JSON non-boolean as boolean"}']);
    const level = await postJson(h.port, "/v2/logging", { log_verbose_level: -1 });
    expect(level.status).toBe(500);
    const empty = await send(h.port, "POST", "/v2/logging", "");
    expect([empty.status, empty.text]).toEqual([
      500,
      '{"error":"failed to parse the request JSON buffer: The document is empty. at 0"}',
    ]);
  });
});

describe("REST restricted APIs", () => {
  let r: HttpServer;
  beforeAll(async () => {
    r = await startHttp({
      http: {
        restricted: [
          { apis: ["model-repository", "logging"], key: "admin-key", value: "secret" },
          { apis: ["inference"], key: "infer-key", value: "go" },
        ],
      },
    });
  });
  afterAll(async () => {
    await r.close();
  });

  it("answers 403 without the header or with a wrong value, and serves with it", async () => {
    for (const headers of [{}, { "admin-key": "wrong" }] as Record<string, string>[]) {
      const denied = await send(r.port, "POST", "/v2/repository/index", "", headers);
      expect(denied.status).toBe(403);
      expect(denied.text).toBe(`{"error":"This API is restricted, expecting header 'admin-key'"}`);
    }
    expect((await send(r.port, "POST", "/v2/repository/index", "", { "Admin-Key": "secret" })).status).toBe(200);
    expect((await send(r.port, "GET", "/v2/logging")).status).toBe(403);
    expect((await send(r.port, "GET", "/v2/logging", undefined, { "admin-key": "secret" })).status).toBe(200);
    const infer = await send(r.port, "POST", "/v2/models/simple/infer", "{}");
    expect(infer.text).toBe(`{"error":"This API is restricted, expecting header 'infer-key'"}`);
    // Checked before the method, as in Triton.
    expect((await send(r.port, "GET", "/v2/models/simple/infer")).status).toBe(403);
    // Other categories stay open.
    expect((await send(r.port, "GET", "/v2/health/ready")).status).toBe(200);
    expect((await send(r.port, "GET", "/v2/models/simple")).status).toBe(200);
  });
});

describe("REST connections", () => {
  it("keeps connections alive and reuses them", async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const sockets = new Set<unknown>();
    const once = () =>
      new Promise<number>((resolve, reject) => {
        const req = request({ host: "127.0.0.1", port: h.port, path: "/v2/health/live", agent }, (res) => {
          sockets.add(res.socket);
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        });
        req.on("error", reject);
        req.end();
      });
    expect(await once()).toBe(200);
    expect(await once()).toBe(200);
    expect(await once()).toBe(200);
    expect(sockets.size).toBe(1);
    agent.destroy();
  });

  it("closes connections once shutdown has begun, and stops being ready", async () => {
    const s = await startHttp();
    try {
      expect((await send(s.port, "GET", "/v2/health/live")).headers.connection).toBe("keep-alive");
      s.server.core.beginShutdown();
      const live = await send(s.port, "GET", "/v2/health/live");
      expect(live.status).toBe(200);
      expect(live.headers.connection).toBe("close");
      expect((await send(s.port, "GET", "/v2/health/ready")).status).toBe(400);
    } finally {
      await s.close();
    }
  });
});

// The REST generate extension (PROTOCOL.md §1.10): /generate and /generate_stream over default
// and decoupled models, the request conversion and its errors, server-sent events, and a
// dropped connection cancelling the request.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postJson, send } from "./http-fixture.js";
import { cleanup, EXAMPLES, range, startServer, tempRepository, waitFor } from "./support/harness.js";

let port: number;
let marker: string;

/** Models that only tests need: one that ticks until cancelled, one that fails after a response. */
function testRepository(): string {
  const repo = tempRepository();
  marker = join(repo, "ticker-cancelled.txt");
  const write = (name: string, source: string) => {
    mkdirSync(join(repo, name, "1"), { recursive: true });
    writeFileSync(
      join(repo, name, "config.pbtxt"),
      `name: "${name}"\nbackend: "js"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n`,
    );
    writeFileSync(join(repo, name, "1", "model.mjs"), source);
  };
  write(
    "ticker",
    `import { writeFileSync } from "node:fs";
     export default class {
       execute(requests) {
         for (const request of requests) {
           const sender = request.responseSender();
           let n = 0;
           const timer = setInterval(() => sender.send({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: Int32Array.of(n++) }] }), 10);
           request.signal.addEventListener("abort", () => {
             clearInterval(timer);
             writeFileSync(${JSON.stringify(marker)}, String(n));
             sender.send(undefined, { final: true });
           });
         }
       }
     }`,
  );
  write(
    "one_then_fail",
    `export default class {
       execute(requests) {
         for (const request of requests) {
           const sender = request.responseSender();
           sender.send({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: request.input("IN").typed() }] });
           sender.send({ error: "failed after one response" }, { final: true });
         }
       }
     }`,
  );
  return repo;
}

beforeAll(async () => {
  const running = await startServer({ http: true, modelRepositories: [EXAMPLES, testRepository()] });
  port = Number(new URL(running.httpUrl as string).port);
});
afterAll(cleanup);

const generate = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  postJson(port, `/v2/models/${path}/generate`, body, headers);
const generateStream = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  postJson(port, `/v2/models/${path}/generate_stream`, body, headers);
const errorText = (message: string) => JSON.stringify({ error: message });
const events = (...objects: string[]) => objects.map((o) => `data: ${o}\n\n`).join("");
const SIXTEEN = range(16);
const SSE = "text/event-stream; charset=utf-8";
const ONE_RESPONSE =
  "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses";

describe("POST .../generate", () => {
  it("runs simple: inputs from top-level keys (batch dim 1), outputs by name, keys in byte order", async () => {
    const r = await generate("simple", { INPUT0: SIXTEEN, INPUT1: SIXTEEN.map(() => 1), id: "g1" });
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe("application/json");
    expect(r.text).toBe(
      `{"OUTPUT0":[${SIXTEEN.map((v) => v + 1)}],"OUTPUT1":[${SIXTEEN.map((v) => v - 1)}],"id":"g1","model_name":"simple","model_version":"1"}`,
    );
  });

  it("runs add_sub (FP32, a JS model) on a pinned version, with other keys as request parameters", async () => {
    const r = await generate("add_sub/versions/1", {
      INPUT0: [1.5, 2, -3, 0.25],
      INPUT1: [0.5, 1, 1, 0.25],
      temperature: 0.5,
      stream: false,
    });
    expect(r.status).toBe(200);
    expect(r.text).toBe(
      '{"OUTPUT0":[2.0,3.0,-2.0,0.5],"OUTPUT1":[1.0,1.0,-4.0,0.0],"model_name":"add_sub","model_version":"1"}',
    );
  });

  it("reads BYTES inputs as JSON strings", async () => {
    const r = await generate("simple_string", {
      INPUT0: SIXTEEN.map(String),
      parameters: { INPUT1: SIXTEEN.map(() => "1") },
    });
    expect(r.status).toBe(200);
    const body = r.json() as Record<string, unknown>;
    expect(body.OUTPUT0).toEqual(SIXTEEN.map((v) => String(v + 1)));
    expect(body.OUTPUT1).toEqual(SIXTEEN.map((v) => String(v - 1)));
  });

  it("answers a decoupled model that sends exactly one response, a single element unwrapped", async () => {
    const r = await generate("square_int32", { IN: 1 });
    expect([r.status, r.text]).toEqual([200, '{"OUT":1,"model_name":"square_int32","model_version":"1"}']);
    // Inputs may also come inside "parameters".
    const nested = await generate("square_int32", { parameters: { IN: [1] }, id: "n" });
    expect(nested.text).toBe('{"OUT":1,"id":"n","model_name":"square_int32","model_version":"1"}');
  });

  it("refuses none or several responses with Triton's text", async () => {
    for (const n of [2, 0]) {
      const r = await generate("square_int32", { IN: n });
      expect([r.status, r.text]).toEqual([500, errorText(ONE_RESPONSE)]);
    }
    const failedSecond = await generate("one_then_fail", { IN: 7 });
    expect([failedSecond.status, failedSecond.text]).toEqual([500, errorText(ONE_RESPONSE)]);
  });

  it("answers the model's error when it is the only response", async () => {
    const r = await generate("square_int32", { IN: -1 });
    expect([r.status, r.text]).toEqual([400, errorText("IN must be >= 0, got -1")]);
  });
});

describe("POST .../generate_stream", () => {
  it("streams repeat_int32's responses as events, in order, without the flag-only final", async () => {
    const r = await generateStream("repeat_int32", { IN: [4, 2, 0, 1], DELAY: [1, 2, 3, 4], WAIT: 0, id: "s" });
    expect(r.status).toBe(200);
    expect(r.headers["content-type"]).toBe(SSE);
    expect(r.headers["content-length"]).toBeUndefined();
    expect(r.text).toBe(
      events(
        ...[4, 2, 0, 1].map(
          (v, i) => `{"IDX":${i},"OUT":${v},"id":"s","model_name":"repeat_int32","model_version":"1"}`,
        ),
      ),
    );
  });

  it("streams square_int32's n responses, and none at all for n = 0", async () => {
    const three = await generateStream("square_int32", { IN: 3 });
    const event = '{"OUT":3,"model_name":"square_int32","model_version":"1"}';
    expect([three.status, three.text]).toEqual([200, events(event, event, event)]);
    const none = await generateStream("square_int32", { IN: 0 });
    expect([none.status, none.headers["content-type"], none.text]).toEqual([200, SSE, ""]);
  });

  it("streams a default-mode model's one response", async () => {
    const r = await generateStream("add_sub", { INPUT0: [1, 2, 3, 4], INPUT1: [1, 1, 1, 1] });
    expect(r.text).toBe(
      events('{"OUTPUT0":[2.0,3.0,4.0,5.0],"OUTPUT1":[0.0,1.0,2.0,3.0],"model_name":"add_sub","model_version":"1"}'),
    );
  });

  it("sends an error after the first event as an event, the status already 200", async () => {
    const r = await generateStream("one_then_fail", { IN: 7 });
    expect(r.status).toBe(200);
    expect(r.text).toBe(
      events('{"OUT":7,"model_name":"one_then_fail","model_version":"1"}', errorText("failed after one response")),
    );
  });

  it("sends a model error that comes first as an event with the error's status", async () => {
    const r = await generateStream("square_int32", { IN: -1 });
    expect([r.status, r.headers["content-type"], r.text]).toEqual([
      400,
      SSE,
      events(errorText("IN must be >= 0, got -1")),
    ]);
  });
});

describe("generate errors before inference: ordinary JSON errors", () => {
  const both = ["generate", "generate_stream"];

  it("answers an unknown model or version 404", async () => {
    for (const action of both) {
      const r = await postJson(port, `/v2/models/nope/${action}`, {});
      expect([r.status, r.headers["content-type"], r.text]).toEqual([
        404,
        "application/json",
        errorText("Request for unknown model: 'nope' is not found"),
      ]);
      const version = await postJson(port, `/v2/models/simple/versions/9/${action}`, {});
      expect([version.status, version.text]).toEqual([
        404,
        errorText("Request for unknown model: 'simple' version 9 is not found"),
      ]);
    }
  });

  it("refuses values that no shape of the input fits", async () => {
    for (const action of both) {
      const r = await postJson(port, `/v2/models/simple/${action}`, { INPUT0: range(15), INPUT1: SIXTEEN });
      expect([r.status, r.headers["content-type"], r.text]).toEqual([
        400,
        "application/json",
        errorText("The schema can not convert input 'INPUT0' to tensor with proper shape"),
      ]);
    }
  });

  it("refuses any Content-Encoding but identity, gzip included", async () => {
    for (const action of both) {
      for (const encoding of ["gzip", "deflate", "br"]) {
        const r = await postJson(
          port,
          `/v2/models/square_int32/${action}`,
          { IN: 1 },
          { "Content-Encoding": encoding },
        );
        expect([r.status, r.text]).toEqual([
          400,
          errorText("Unsupported content-encoding, only 'identity' is supported."),
        ]);
      }
      const identity = await postJson(
        port,
        `/v2/models/square_int32/${action}`,
        { IN: 1 },
        { "Content-Encoding": "identity" },
      );
      expect(identity.status).toBe(200);
    }
  });

  it("answers the core's request checks, the JSON parser and parameter types with their texts", async () => {
    const missing = await generateStream("simple", { INPUT0: SIXTEEN });
    expect([missing.status, missing.headers["content-type"], missing.text]).toEqual([
      400,
      "application/json",
      errorText(
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
      ),
    ]);
    const badJson = await send(port, "POST", "/v2/models/simple/generate", "{");
    expect(badJson.status).toBe(500);
    expect(badJson.text).toMatch(/^\{"error":"failed to parse the request JSON buffer: /);
    const badType = await generate("square_int32", { IN: "one" });
    expect([badType.status, badType.text]).toEqual([
      500,
      errorText("Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
    ]);
    const object = await generate("square_int32", { IN: 1, nested: { a: 1 } });
    expect([object.status, object.text]).toEqual([
      400,
      errorText("parameter 'nested' has invalid type. It should be either 'int', 'bool', or 'string'."),
    ]);
    const nested = await generate("square_int32", { IN: 1, parameters: { nested: [1] } });
    expect([nested.status, nested.text]).toEqual([
      400,
      errorText(
        "Converting keyword: 'parameters': parameter 'nested' has invalid type. It should be either 'int', 'bool', or 'string'.",
      ),
    ]);
    const notObject = await generate("square_int32", { IN: 1, parameters: 1 });
    expect([notObject.status, notObject.text]).toEqual([
      500,
      errorText("Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"),
    ]);
  });
});

/** POST to generate_stream and read events until `count` have arrived, then drop the connection. */
function readThenDrop(path: string, body: unknown, count: number): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const received: string[] = [];
    let buffer = "";
    const req = request({ host: "127.0.0.1", port, method: "POST", path, agent: false }, (res) => {
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        buffer += chunk;
        for (let end = buffer.indexOf("\n\n"); end !== -1; end = buffer.indexOf("\n\n")) {
          received.push(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
        if (received.length >= count) {
          req.destroy();
          resolve(received);
        }
      });
      res.on("end", () => reject(new Error(`the stream ended after ${received.length} events`)));
    });
    req.on("error", (error) => {
      if (received.length < count) reject(error);
    });
    req.end(JSON.stringify(body));
  });
}

describe("a dropped connection", () => {
  it("cancels the request: the model sees its signal abort and stops", async () => {
    const received = await readThenDrop("/v2/models/ticker/generate_stream", { IN: 0 }, 3);
    expect(received.slice(0, 3)).toEqual(
      [0, 1, 2].map((n) => `data: {"OUT":${n},"model_name":"ticker","model_version":"1"}`),
    );
    const ticks = Number(
      await waitFor(() => (existsSync(marker) ? readFileSync(marker, "utf8") : undefined), {
        timeoutMs: 4000,
        what: "the model to see the cancellation",
      }),
    );
    expect(ticks).toBeGreaterThanOrEqual(3);
    expect(ticks).toBeLessThan(100);
  });

  it("ends repeat_int32's request long before its next response was due", async () => {
    const stats = async () => {
      const r = await send(port, "GET", "/v2/models/repeat_int32/stats");
      const inference = (r.json() as { model_stats: { inference_stats: Record<string, { count: number }> }[] })
        .model_stats[0]?.inference_stats;
      return (inference?.success?.count ?? 0) + (inference?.fail?.count ?? 0);
    };
    const before = await stats();
    const received = await readThenDrop(
      "/v2/models/repeat_int32/generate_stream",
      { IN: [5, 6], DELAY: [0, 600_000], WAIT: 0 },
      1,
    );
    expect(received[0]).toBe('data: {"IDX":0,"OUT":5,"model_name":"repeat_int32","model_version":"1"}');
    // The second response was due in 10 minutes; the request ends as soon as the model sees
    // the cancellation.
    await waitFor(async () => (await stats()) === before + 1, { timeoutMs: 4000, what: "the request to end" });
  });
});

// REST inference bodies past Triton's limits on JSON: a shape whose element count or byte size
// does not fit an int64, and data nested deeper than 100 levels, are the client's mistakes
// (400 with Triton's texts, as Triton's L0_http QA checks them), not server errors (500).
import { beforeAll, describe, expect, it } from "vitest";
import { type HttpServer, postJson, SIXTEEN, send, startHttp } from "./http-fixture.js";

let server: HttpServer;

beforeAll(async () => {
  server = await startHttp({ controlMode: "explicit", loadModels: ["simple", "simple_identity"] });
  return () => server.close();
});

/** `value` inside `depth` arrays. */
function nested(depth: number, value: unknown): unknown {
  let out = value;
  for (let i = 0; i < depth; i++) out = [out];
  return out;
}

/** An INPUT0 of `shape` (written as given: 2^60 + 2 is not a JavaScript number) for simple. */
function overflowingBody(shape: string): string {
  const input1 = JSON.stringify({ name: "INPUT1", datatype: "INT32", shape: [1, 16], data: SIXTEEN });
  return `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":${shape},"data":[1]},${input1}]}`;
}

describe("a shape too large for an int64", () => {
  it("is 400: the element count, then the byte size", async () => {
    const count = await send(
      server.port,
      "POST",
      "/v2/models/simple/infer",
      overflowingBody("[16,1152921504606846978]"),
    );
    expect([count.status, count.json()]).toEqual([
      400,
      {
        error:
          "shape [16,1152921504606846978] of input 'INPUT0' causes total element count to exceed maximum size of 9223372036854775807",
      },
    ]);
    const bytes = await send(
      server.port,
      "POST",
      "/v2/models/simple/infer",
      overflowingBody("[4,1152921504606846978]"),
    );
    expect([bytes.status, bytes.json()]).toEqual([
      400,
      {
        error:
          "byte size overflow for input 'INPUT0': 4611686018427387912 elements of INT32 exceed the maximum size of 9223372036854775807 bytes",
      },
    ]);
  });
});

describe("data nested deeper than 100 levels", () => {
  it("is 400 with Triton's text, for BYTES and numbers alike; 50 levels are read", async () => {
    const body = (datatype: string, data: unknown) => ({ inputs: [{ name: "INPUT0", datatype, shape: [1, 1], data }] });
    const error = { error: "JSON nesting depth exceeds maximum allowed limit (100)" };
    const deepBytes = await postJson(
      server.port,
      "/v2/models/simple_identity/infer",
      body("BYTES", nested(120, "hello")),
    );
    expect([deepBytes.status, deepBytes.json()]).toEqual([400, error]);
    const deepNumbers = await postJson(server.port, "/v2/models/simple/infer", body("INT32", nested(120, 1)));
    expect([deepNumbers.status, deepNumbers.json()]).toEqual([400, error]);
    const shallow = await postJson(server.port, "/v2/models/simple_identity/infer", body("BYTES", nested(50, "hello")));
    expect(shallow.status).toBe(200);
  });
});

describe("JSON nested deeper than 100 levels outside tensor data", () => {
  it("is read, and refused only where a value of another type is: a 250,000-deep 'ready' (Triton's text)", async () => {
    const deep = 250_000;
    const ready = `{"ready":${"[".repeat(deep)}true${"]".repeat(deep)}}`;
    const index = await send(server.port, "POST", "/v2/repository/index", ready);
    expect([index.status, index.json()]).toEqual([400, { error: "Invalid value for 'ready': expected a boolean" }]);
    // A deep member nobody reads is no error, as in Triton.
    const ignored = await send(
      server.port,
      "POST",
      "/v2/repository/index",
      `{"other":${"[".repeat(deep)}${"]".repeat(deep)}}`,
    );
    expect(ignored.status).toBe(200);
    const broken = await send(server.port, "POST", "/v2/repository/index", `{"ready":${"[".repeat(deep)}}`);
    expect([broken.status, broken.json()]).toEqual([
      500,
      { error: `failed to parse the request JSON buffer: Invalid value. at ${deep + 9}` },
    ]);
  });
});

// While a model loads, it is LOADING from the start of the load, as in Triton: the index shows
// `{"name","version","state":"LOADING"}`, model ready answers "not ready" (HTTP 400, gRPC
// ready=false) rather than "unknown model", and infer answers Triton's not-ready errors. That holds
// while the backend auto-completes the config and while an ensemble's composing models load, not
// only while `initialize` runs; and a reload of a serving version keeps it READY and serving.
// Each phase is held open by a file the test creates (the model polls for it), never by a sleep.
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { postJson, send } from "./http-fixture.js";
import { cleanup, type InferenceClient, startServer, tempRepository, waitFor } from "./support/harness.js";

/** Every gated model's gates, opened after each test so that a failed test's load ends and its server closes. */
const allGates: Gates[] = [];
afterEach(async () => {
  for (const gates of allGates.splice(0)) {
    writeFileSync(gates.autoComplete, "");
    writeFileSync(gates.initialize, "");
  }
  await cleanup();
});

/** A server in explicit mode: its REST port and a gRPC client. */
interface Served {
  port: number;
  client: InferenceClient;
}

/** The files a `gated` model waits for (gates) and writes when it reaches a phase (marks). */
interface Gates {
  autoComplete: string;
  initialize: string;
  inAutoComplete: string;
  inInitialize: string;
}

/**
 * A scripted identity model whose `autoCompleteConfig` and `initialize` each write a mark, then
 * wait for their gate file.
 */
function gatedModel(repo: string, name: string): Gates {
  const folder = join(repo, name);
  mkdirSync(join(folder, "1"), { recursive: true });
  const gates: Gates = {
    autoComplete: join(repo, `${name}.gate-auto-complete`),
    initialize: join(repo, `${name}.gate-initialize`),
    inAutoComplete: join(repo, `${name}.in-auto-complete`),
    inInitialize: join(repo, `${name}.in-initialize`),
  };
  allGates.push(gates);
  writeFileSync(
    join(folder, "config.pbtxt"),
    `name: "${name}"
backend: "js"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "initialize_timeout_ms" value: { string_value: "0" } }
`,
  );
  writeFileSync(
    join(folder, "1", "model.mjs"),
    `import { existsSync, writeFileSync } from "node:fs";
const gates = ${JSON.stringify(gates)};
async function pass(mark, gate) {
  writeFileSync(mark, "");
  while (!existsSync(gate)) await new Promise((resolve) => setTimeout(resolve, 10));
}
export default class {
  static async autoCompleteConfig(config) {
    await pass(gates.inAutoComplete, gates.autoComplete);
    return config;
  }
  async initialize() {
    await pass(gates.inInitialize, gates.initialize);
  }
  execute(requests) {
    return requests.map((request) => ({ outputs: [{ ...request.input("IN"), name: "OUT" }] }));
  }
}
`,
  );
  return gates;
}

/** An ensemble of one step running `step`. */
function ensembleOf(repo: string, name: string, step: string): void {
  mkdirSync(join(repo, name, "1"), { recursive: true });
  writeFileSync(
    join(repo, name, "config.pbtxt"),
    `name: "${name}"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "${step}" model_version: -1
  input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }
`,
  );
}

async function start(repo: string): Promise<Served> {
  const { httpUrl, client } = await startServer({ modelRepositories: [repo], controlMode: "explicit", http: true });
  return { port: Number(new URL(httpUrl ?? "").port), client };
}

/** Start a load of `name`; its reply comes when the load ends. */
function startLoad(server: Served, name: string): ReturnType<typeof postJson> {
  const reply = postJson(server.port, `/v2/repository/models/${name}/load`, {});
  reply.catch(() => undefined); // a failed test closes the server under it
  return reply;
}

async function indexOf(server: Served, name: string): Promise<unknown[]> {
  const index = (await postJson(server.port, "/v2/repository/index", {})).json() as { name: string }[];
  return index.filter((entry) => entry.name === name);
}

const LOADING = (name: string) => [{ name, version: "1", state: "LOADING" }];
const READY = (name: string) => [{ name, version: "1", state: "READY" }];
const IN = { inputs: [{ name: "IN", shape: [1], datatype: "INT32", data: [7] }] };

/** What REST ready and infer answer now, without and with the version: `[status, body]` each. */
async function answers(server: Served, name: string): Promise<[number, string][]> {
  const replies = await Promise.all([
    send(server.port, "GET", `/v2/models/${name}/ready`),
    send(server.port, "GET", `/v2/models/${name}/versions/1/ready`),
    postJson(server.port, `/v2/models/${name}/infer`, IN),
    postJson(server.port, `/v2/models/${name}/versions/1/infer`, IN),
  ]);
  return replies.map((r) => [r.status, r.status === 200 && r.text !== "" ? "ok" : r.text]);
}

/** Triton's answers for a model whose version 1 is not READY yet. */
const NOT_READY = (name: string): [number, string][] => [
  [400, '{"error":"Model version not ready"}'],
  [400, '{"error":"Model version not ready"}'],
  [404, `{"error":"Request for unknown model: '${name}' has no available versions"}`],
  [503, `{"error":"Request for unknown model: '${name}' version 1 is not at ready state"}`],
];
const SERVING: [number, string][] = [
  [200, ""],
  [200, ""],
  [200, "ok"],
  [200, "ok"],
];

describe("a model that is loading", () => {
  it("is LOADING, and not ready, from the start of its load, auto-complete included", async () => {
    const repo = tempRepository();
    const gates = gatedModel(repo, "gated");
    const server = await start(repo);
    expect(await indexOf(server, "gated")).toEqual([{ name: "gated" }]);

    const load = startLoad(server, "gated");
    await waitFor(() => existsSync(gates.inAutoComplete), { what: "autoCompleteConfig to start" });
    expect(await indexOf(server, "gated")).toEqual(LOADING("gated"));
    expect(await answers(server, "gated")).toEqual(NOT_READY("gated"));
    expect(await server.client.modelReady({ name: "gated" })).toMatchObject({ ready: false });
    expect(await server.client.modelReady({ name: "gated", version: "1" })).toMatchObject({ ready: false });
    expect((await send(server.port, "GET", "/v2/health/ready")).status).toBe(400);

    writeFileSync(gates.autoComplete, "");
    await waitFor(() => existsSync(gates.inInitialize), { what: "initialize to start" });
    expect(await indexOf(server, "gated")).toEqual(LOADING("gated"));
    expect(await answers(server, "gated")).toEqual(NOT_READY("gated"));

    writeFileSync(gates.initialize, "");
    expect((await load).status).toBe(200);
    expect(await indexOf(server, "gated")).toEqual(READY("gated"));
    expect(await answers(server, "gated")).toEqual(SERVING);
  }, 60_000);

  it("keeps a serving version READY and serving while it reloads", async () => {
    const repo = tempRepository();
    const gates = gatedModel(repo, "gated");
    writeFileSync(gates.autoComplete, "");
    writeFileSync(gates.initialize, "");
    const server = await start(repo);
    expect((await postJson(server.port, "/v2/repository/models/gated/load", {})).status).toBe(200);

    for (const file of Object.values(gates)) rmSync(file, { force: true });
    const reload = startLoad(server, "gated");
    await waitFor(() => existsSync(gates.inAutoComplete), { what: "autoCompleteConfig to start" });
    expect(await indexOf(server, "gated")).toEqual(READY("gated"));
    expect(await answers(server, "gated")).toEqual(SERVING);
    writeFileSync(gates.autoComplete, "");
    await waitFor(() => existsSync(gates.inInitialize), { what: "initialize to start" });
    expect(await indexOf(server, "gated")).toEqual(READY("gated"));
    expect(await answers(server, "gated")).toEqual(SERVING);
    writeFileSync(gates.initialize, "");
    expect((await reload).status).toBe(200);
    expect(await indexOf(server, "gated")).toEqual(READY("gated"));
  }, 60_000);

  it("shows an ensemble LOADING while its composing models load", async () => {
    const repo = tempRepository();
    const gates = gatedModel(repo, "gated");
    ensembleOf(repo, "pipeline", "gated");
    const server = await start(repo);

    const load = startLoad(server, "pipeline");
    await waitFor(() => existsSync(gates.inAutoComplete), { what: "the composing model's load to start" });
    expect(await indexOf(server, "pipeline")).toEqual(LOADING("pipeline"));
    expect(await indexOf(server, "gated")).toEqual(LOADING("gated"));
    expect(await answers(server, "pipeline")).toEqual(NOT_READY("pipeline"));

    writeFileSync(gates.autoComplete, "");
    writeFileSync(gates.initialize, "");
    expect((await load).status).toBe(200);
    expect(await indexOf(server, "pipeline")).toEqual(READY("pipeline"));
    expect(await answers(server, "pipeline")).toEqual(SERVING);
  }, 60_000);
});

// The REST handler over a stand-in core: what happens when clients go away or the core throws.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { InferenceError } from "../src/base/errors.js";
import type { InferenceServer, ModelView } from "../src/core/inference-server.js";
import { TraceFiles } from "../src/core/trace-files.js";
import { DEFAULT_TRACE_CONFIG, TraceSettings } from "../src/core/trace-settings.js";
import { createRestFrontend } from "../src/frontend/http/rest-frontend.js";
import { nodeRequestListener } from "../src/frontend/transport/http1-node.js";
import { send } from "./http-fixture.js";
import { abortingCore } from "./support/aborting-core.js";

let http: Server | undefined;
afterEach(async () => {
  http?.closeAllConnections();
  await new Promise((resolve) => http?.close(resolve));
  http = undefined;
});

/** Serve `core` (only what the handler touches) on a free port. */
async function serve(core: Partial<InferenceServer>): Promise<number> {
  const tracing = new TraceSettings(DEFAULT_TRACE_CONFIG, new TraceFiles(() => {}));
  const rest = createRestFrontend({ accepting: true, tracing, ...core } as InferenceServer);
  http = createServer(nodeRequestListener(rest.handle, () => false));
  await new Promise<void>((resolve) => http?.listen(0, "127.0.0.1", resolve));
  return (http.address() as AddressInfo).port;
}

const model = { decoupled: false, config: { input: [], maxBatchSize: 0 } } as unknown as ModelView;
const body = JSON.stringify({ inputs: [{ name: "X", shape: [1], datatype: "INT32", data: [1] }] });

describe("REST handler", () => {
  it("cancels the request (aborts its signal) when the client disconnects", async () => {
    const { core, started, aborted } = abortingCore(model);
    const port = await serve(core);
    const socket = connect(port, "127.0.0.1", () => {
      socket.write(`POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      void started.then(() => socket.destroy());
    });
    expect(await aborted).toBe(true);
  });

  it("survives a client that disconnects in the middle of its body", async () => {
    let inferCalls = 0;
    const port = await serve({
      model: () => model,
      inferenceModel: () => model,
      infer: async () => {
        inferCalls++;
        return { modelName: "m", modelVersion: "1", id: "", parameters: {}, outputs: [] };
      },
    });
    await new Promise<void>((resolve) => {
      const socket = connect(port, "127.0.0.1", () => {
        socket.write('POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"inp', () => {
          socket.destroy();
          resolve();
        });
      });
    });
    const r = await send(port, "POST", "/v2/models/m/infer", body);
    expect(r.text).toBe('{"model_name":"m","model_version":"1","outputs":[]}');
    expect(inferCalls).toBe(1);
  });

  it("answers an unexpected exception 500 without its JavaScript text, and logs it", async () => {
    const logged: string[] = [];
    const port = await serve({
      metadata: () => {
        throw new TypeError("boom");
      },
      log: { error: (line: string) => logged.push(line) } as never,
    });
    const r = await send(port, "GET", "/v2");
    expect([r.status, r.json()]).toEqual([
      500,
      { error: "internal error: the request failed unexpectedly; the server log has the details" },
    ]);
    expect(logged[0]).toMatch(/^HTTP GET \/v2: TypeError: boom/);
  });

  it("answers an error thrown by the core with its status, unlogged", async () => {
    const logged: string[] = [];
    const port = await serve({
      inferenceModel: () => {
        throw new InferenceError("MODEL_VERSION_NOT_READY", { model: "m", version: "2" });
      },
      log: { error: (line: string) => logged.push(line) } as never,
    });
    const r = await send(port, "POST", "/v2/models/m/versions/2/infer", body);
    expect([r.status, r.text]).toEqual([
      503,
      `{"error":"Request for unknown model: 'm' version 2 is not at ready state"}`,
    ]);
    expect(logged).toEqual([]);
  });
});

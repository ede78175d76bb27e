// Graceful shutdown on the REST frontend with keep-alive connections: requests received before
// close() are answered; requests a client has already sent on an idle kept-alive connection when
// close() begins are answered 503 with Connection: close instead of being reset; the port then
// stops accepting and close() resolves once the last request is answered.
import { Agent, type ClientRequest, request } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, fp32Bytes, range, startServer, waitFor } from "./support/harness.js";
import { tryConnect } from "./support/process.js";

afterEach(cleanup);

type Outcome = { status: number; connection: string | undefined; body: string } | { error: string };

/** Send a request and settle with its answer, or with the error code it failed with. */
function call(
  port: number,
  agent: Agent | undefined,
  method: string,
  path: string,
  body?: Uint8Array,
  headers: Record<string, string | number> = {},
): { req: ClientRequest; outcome: Promise<Outcome> } {
  const req = request({ host: "127.0.0.1", port, method, path, agent, headers });
  const outcome = new Promise<Outcome>((resolve) => {
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        text += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body: text }));
      res.on("error", (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
    });
    req.on("error", (error: NodeJS.ErrnoException) => resolve({ error: error.code ?? error.message }));
  });
  if (body !== undefined) req.end(body);
  else if (headers.Expect) req.flushHeaders();
  else req.end();
  return { req, outcome };
}

/** A binary infer request for mlp_classifier: 64 rows of 64 FP32 values. */
function mlpBody(): { body: Uint8Array; headers: Record<string, string | number> } {
  const blob = fp32Bytes(range(64 * 64).map((i) => Math.sin(i / 5)));
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: "INPUT", datatype: "FP32", shape: [64, 64], parameters: { binary_data_size: blob.length } }],
    }),
  );
  const body = Buffer.concat([header, blob]);
  return { body, headers: { "Inference-Header-Content-Length": header.length, "Content-Length": body.length } };
}

const NOT_READY = { status: 503, connection: "close", body: '{"error":"Server not ready"}' };

describe("server.close() with keep-alive REST connections", () => {
  it("answers every request, none is reset: received ones get their answer, later ones 503", async () => {
    const { server, httpUrl } = await startServer({
      http: true,
      controlMode: "explicit",
      loadModels: ["simple", "mlp_classifier"],
      exitTimeoutSecs: 30,
    });
    const port = Number(new URL(httpUrl as string).port);
    const agents = range(4).map(() => new Agent({ keepAlive: true, maxSockets: 4 }));
    const name = `127.0.0.1:${port}:`;

    // Every agent opens its four connections, which then wait idle in its pool.
    const warm = agents.flatMap((agent) => range(4).map(() => call(port, agent, "GET", "/v2/health/live").outcome));
    expect(await Promise.all(warm)).toEqual(range(16).map(() => ({ status: 200, connection: "keep-alive", body: "" })));
    await waitFor(() => agents.every((agent) => agent.freeSockets[name]?.length === 4), { what: "idle sockets" });

    // A request the server has received (it answered 100 Continue) whose body is still to come:
    // it keeps the drain going until the test sends the body.
    const json = Buffer.from(
      JSON.stringify({
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: range(16) },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: range(16) },
        ],
      }),
    );
    const held = call(port, undefined, "POST", "/v2/models/simple/infer", undefined, {
      Expect: "100-continue",
      "Content-Length": json.length,
    });
    await new Promise<void>((resolve) => held.req.once("continue", () => resolve()));

    // Work in flight on two agents, in whatever state it is in when close() begins.
    const mlp = mlpBody();
    const busy = agents
      .slice(0, 2)
      .flatMap((agent) =>
        range(4).map(() => call(port, agent, "POST", "/v2/models/mlp_classifier/infer", mlp.body, mlp.headers).outcome),
      );
    await Promise.all(busy.slice(0, 2));
    // On the other agents' idle connections, requests written but not yet read by the server.
    const late = agents
      .slice(2)
      .flatMap((agent) =>
        range(4).map(() => call(port, agent, "POST", "/v2/models/mlp_classifier/infer", mlp.body, mlp.headers).outcome),
      );
    await new Promise((resolve) => process.nextTick(resolve));
    const closing = server.close();

    const answers = await Promise.all([...busy, ...late]);
    expect(answers.filter((a) => "error" in a)).toEqual([]);
    for (const answer of answers) {
      if ("status" in answer && answer.status !== 200) expect(answer).toEqual(NOT_READY);
    }
    expect(await Promise.all(late)).toEqual(range(8).map(() => NOT_READY));

    held.req.end(json);
    const answer = await held.outcome;
    expect(answer).toMatchObject({ status: 200, connection: "close" });
    expect(answer).toHaveProperty("body", expect.stringContaining(`"data":[${range(16).map((i) => 2 * i)}]`));
    await closing;
    expect(await tryConnect(port)).toBe("ECONNREFUSED");
    for (const agent of agents) agent.destroy();
  });
});

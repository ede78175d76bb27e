// The REST client reads replies in which non-finite FP32 values are the bare tokens NaN,
// Infinity and -Infinity (as Triton and Galley write them, docs/guides/protocol.md), without
// touching the same words inside strings, against a real server running add_sub.
import { createLogger, createServer, type GalleyServer } from "@galley/server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRestClient, tensor } from "../src/index.js";

const EXAMPLES = new URL("../../../examples/model_repository", import.meta.url).pathname;

let server: GalleyServer;
let httpUrl: string;

beforeAll(async () => {
  server = createServer({
    modelRepositories: [EXAMPLES],
    controlMode: "explicit",
    loadModels: ["add_sub"],
    http: { host: "127.0.0.1", port: 0 },
    grpc: false,
    metrics: false,
    log: createLogger({ write: () => {} }),
  });
  const { http } = await server.listen();
  httpUrl = `http://127.0.0.1:${http?.port}`;
}, 60_000);

afterAll(async () => {
  await server.close();
});

describe("a REST reply with non-finite values as JSON", () => {
  it("reads NaN, Infinity and -Infinity as numbers and leaves strings as they are", async () => {
    const client = createRestClient({ baseUrl: httpUrl });
    // The reply echoes the id, so the words and an escaped quote also appear inside a string.
    const id = 'NaN "Infinity" -Infinity \\ [NaN]';
    const result = await client.infer("add_sub", {
      id,
      // 3e38 + 3e38 overflows FP32; -3e38 - 3e38 too; NaN stays NaN.
      inputs: {
        INPUT0: tensor.fp32([4], [3e38, -3e38, Number.NaN, 1.5]),
        INPUT1: tensor.fp32([4], [3e38, 3e38, 0, 2]),
      },
      outputs: [
        { name: "OUTPUT0", binary: false },
        { name: "OUTPUT1", binary: false },
      ],
    });
    expect(result.id).toBe(id);
    expect([...result.output("OUTPUT0").fp32()]).toEqual([Number.POSITIVE_INFINITY, 0, Number.NaN, 3.5]);
    expect([...result.output("OUTPUT1").fp32()]).toEqual([0, Number.NEGATIVE_INFINITY, Number.NaN, -0.5]);
  });
});

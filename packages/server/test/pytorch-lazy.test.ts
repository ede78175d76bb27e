// The server loads a backend's native code only when a model needs it: started over a repository
// of a scripted model alone, neither libtorch (the torch addon) nor onnxruntime-node is mapped.
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, startServer, tempRepository } from "./support/harness.js";

afterEach(cleanup);

describe("lazy backends", () => {
  it("starts and serves without loading libtorch or onnxruntime", async () => {
    const { client } = await startServer({ modelRepositories: [tempRepository(["square_int32"])] });
    expect((await client.serverReady({})).ready).toBe(true);
    const maps = readFileSync("/proc/self/maps", "utf8");
    expect(maps).not.toMatch(/galley_torch|libtorch_cpu|libonnxruntime/);
  });
});

// A load that never finishes (a scripted model whose `initialize` never returns) must not hold the
// model: an unload goes ahead at once and the load fails, and shutdown does not wait for it.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { cleanup, startServer, tempRepository, waitFor } from "./support/harness.js";

afterEach(cleanup);

function neverInitializes(repo: string): void {
  mkdirSync(join(repo, "never", "1"), { recursive: true });
  writeFileSync(
    join(repo, "never", "config.pbtxt"),
    `name: "never"
backend: "js"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
parameters { key: "initialize_timeout_ms" value: { string_value: "600000" } }
`,
  );
  writeFileSync(
    join(repo, "never", "1", "model.mjs"),
    `export default class {
  initialize() { return new Promise(() => {}); }
  execute(requests) { return requests.map(() => ({ outputs: [] })); }
}
`,
  );
}

describe("a load that never finishes", () => {
  it("gives way to an unload, which answers at once", async () => {
    const repo = tempRepository(["simple"]);
    neverInitializes(repo);
    const { client, server } = await startServer({
      modelRepositories: [repo],
      controlMode: "explicit",
      loadModels: ["simple"],
      exitTimeoutSecs: 30,
    });
    const load = client.repositoryModelLoad({ modelName: "never" }).catch((error: unknown) => error);
    await waitFor(
      async () => (await client.repositoryIndex({})).models.some((m) => m.name === "never" && m.state === "LOADING"),
      { what: "the load to start" },
    );
    await client.repositoryModelUnload({ modelName: "never" });
    const failure = await load;
    expect(failure).toBeInstanceOf(ConnectError);
    expect([(failure as ConnectError).code, (failure as ConnectError).rawMessage]).toEqual([
      Code.InvalidArgument,
      "load failed for model 'never': version 1 is at UNAVAILABLE state: Invalid argument: unable to load model 'never': model instance 'never_0' was unloaded while it was initializing;",
    ]);
    const never = (await client.repositoryIndex({})).models.filter((m) => m.name === "never");
    expect(never.map((m) => m.state)).toEqual(["UNAVAILABLE"]);
    expect((await client.modelReady({ name: "simple" })).ready).toBe(true);

    // Shutdown does not wait for a load stuck the same way.
    const again = client.repositoryModelLoad({ modelName: "never" }).catch((error: unknown) => error);
    await waitFor(
      async () => (await client.repositoryIndex({})).models.some((m) => m.name === "never" && m.state === "LOADING"),
      { what: "the second load to start" },
    );
    const start = process.hrtime.bigint();
    await server.close();
    expect(Number(process.hrtime.bigint() - start) / 1e9).toBeLessThan(10);
    expect(await again).toBeInstanceOf(ConnectError);
  });
});

// SHARED_STUB_PROCESS "yes": a model's instances run in one stub process (one thread each), each
// still an instance of its own to the server: concurrent executes, BLS, logging, a crash that
// takes them all and restarts them together, an unload that ends the process.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/index.js";
import {
  copyPythonModels,
  pythonWithNumpy,
  pythonWithoutNumpy,
  shmLeftovers,
  stubProcesses,
} from "./python-harness.js";
import {
  cleanup,
  expectGrpcError,
  int32Bytes,
  pushable,
  readBytesTensor,
  readInt32,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";

const python = pythonWithNumpy();

afterEach(cleanup);

/** The stub processes of this server that run `instance` (named on their command line). */
function stubsOf(instance: string): number[] {
  return stubProcesses()
    .filter((p) => p.ppid === process.pid)
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p.pid}/cmdline`, "utf8").split("\0").includes(instance);
      } catch {
        return false;
      }
    })
    .map((p) => p.pid);
}

const NAMES = ["shared_stub_0_0", "shared_stub_0_1", "shared_stub_0_2"];

async function sharedServer(setup: (repo: string) => void = () => undefined) {
  const repo = tempRepository();
  copyPythonModels(repo, ["shared_stub", "fragile"]);
  setup(repo);
  const lines: string[] = [];
  const log = createLogger({ write: (line) => lines.push(line) });
  const running = await startServer({
    modelRepositories: [repo],
    pythonExecutable: python,
    controlMode: "explicit",
    loadModels: ["*"],
    log,
  });
  expect(running.failedModels).toEqual([]);
  return { ...running, repo, lines };
}

function request(value: number) {
  return {
    modelName: "shared_stub",
    inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
    rawInputContents: [int32Bytes([value])],
  };
}

/** Three requests at once that meet in their executes: each on its own instance, all at the same time. */
async function meet(client: Awaited<ReturnType<typeof sharedServer>>["client"], value: -20 | -21) {
  const replies = await Promise.all([0, 1, 2].map(() => client.modelInfer(request(value))));
  return replies.map((r) => ({
    pid: readInt32(r.rawOutputContents[0])[0] ?? 0,
    value: readInt32(r.rawOutputContents[0])[1] ?? 0,
    instance: readBytesTensor(r.rawOutputContents[1])[0] ?? "",
  }));
}

describe("SHARED_STUB_PROCESS", () => {
  it("runs a model's three instances in one process, executing at once, with BLS and logging from each", async () => {
    const { client, lines } = await sharedServer();
    const pids = stubsOf("shared_stub_0_0");
    expect(pids).toHaveLength(1);
    for (const name of NAMES) expect(stubsOf(name)).toEqual(pids);
    // Three executes in at once: three instances, concurrently, all in that process.
    const met = await meet(client, -20);
    expect(met.map((m) => m.instance).sort()).toEqual(NAMES);
    expect(met.map((m) => m.pid)).toEqual([pids[0], pids[0], pids[0]]);
    // A BLS call from each instance gets its own answer (fragile: IN + 1).
    const called = await meet(client, -21);
    expect(called.map((c) => [c.instance, c.value]).sort()).toEqual(NAMES.map((n, i) => [n, i + 101]));
    // pb_utils from a thread the model started works for that model's instance.
    const logged = await client.modelInfer(request(-22));
    const instance = readBytesTensor(logged.rawOutputContents[1])[0];
    expect(lines.some((l) => l.includes(`${instance}: hello from ${instance}`))).toBe(true);
  });

  it("a crash in one instance takes the process; the next request restarts it with every instance in it", async () => {
    const { client } = await sharedServer();
    const [before] = stubsOf("shared_stub_0_0");
    await expectGrpcError(
      client.modelInfer(request(-3)),
      Code.Internal,
      /model instance 'shared_stub_0_\d' exited with code 3/,
    );
    await waitFor(() => stubsOf("shared_stub_0_0").length === 0, { what: "the shared process to be gone" });
    expect((await client.modelReady({ name: "shared_stub" })).ready).toBe(false);
    // As with a process per instance: the next request fails in Triton's words and restarts the
    // stub; the other instances start in the new process with it.
    await expectGrpcError(
      client.modelInfer(request(1)),
      Code.Internal,
      /Stub process 'shared_stub_0_\d' is not healthy/,
    );
    await waitFor(async () => (await client.modelReady({ name: "shared_stub" })).ready, { what: "all instances up" });
    const after = stubsOf("shared_stub_0_0");
    expect(after).toHaveLength(1);
    expect(after[0]).not.toBe(before);
    const met = await meet(client, -20);
    expect(met.map((m) => m.instance).sort()).toEqual(NAMES);
    expect(new Set(met.map((m) => m.pid))).toEqual(new Set(after));
  });

  it("an execute past execute_timeout_ms ends the process with every instance in it", async () => {
    const { client } = await sharedServer((repo) => {
      const config = join(repo, "shared_stub", "config.pbtxt");
      writeFileSync(
        config,
        `${readFileSync(config, "utf8")}\nparameters { key: "execute_timeout_ms" value: { string_value: "300" } }\n`,
      );
    });
    const [before] = stubsOf("shared_stub_0_0");
    // -20 alone waits for two more executes that never come.
    await expectGrpcError(client.modelInfer(request(-20)), Code.Internal, /did not finish execute within 300 ms/);
    await waitFor(() => stubsOf("shared_stub_0_0").length === 0, { what: "the shared process to be gone" });
    await expectGrpcError(client.modelInfer(request(1)), Code.Internal, /is not healthy/);
    await waitFor(async () => (await client.modelReady({ name: "shared_stub" })).ready, { what: "all instances up" });
    expect(stubsOf("shared_stub_0_0")).not.toEqual([before]);
  });

  it("an unload ends the process and leaves no shared memory; the model loads again", async () => {
    const { client, lines } = await sharedServer();
    expect(stubsOf("shared_stub_0_0")).toHaveLength(1);
    await client.repositoryModelUnload({ modelName: "shared_stub" });
    await waitFor(() => stubsOf("shared_stub_0_0").length === 0, { what: "the shared process to end" });
    // Each instance's finalize ran: its line reaches the log through the process's stdout, whose
    // last bytes may be read after the process is gone. (The fixture writes each line in one
    // write: print()'s pieces from the three finalizes, run at once, interleaved under load.)
    const finalized = (name: string) => lines.some((l) => l.trimEnd().endsWith(`finalized ${name}`));
    await waitFor(() => NAMES.every(finalized), { what: "every instance's finalize in the log" });
    expect(shmLeftovers().filter((n) => n.includes(`_${process.pid}_`))).toHaveLength(
      // fragile's, still loaded: its segments are unlinked once mapped, so none either.
      0,
    );
    await client.repositoryModelLoad({ modelName: "shared_stub" });
    expect((await meet(client, -20)).map((m) => m.instance).sort()).toEqual(NAMES);
  });

  it("a decoupled model's instances answer from their own threads, each stream its own responses", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["repeat_int32"]);
    const config = join(repo, "repeat_int32", "config.pbtxt");
    writeFileSync(
      config,
      `${readFileSync(config, "utf8")}\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n` +
        `parameters { key: "SHARED_STUB_PROCESS" value: { string_value: "yes" } }\n`,
    );
    const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(stubsOf("repeat_int32_0_0")).toEqual(stubsOf("repeat_int32_0_1"));
    expect(stubsOf("repeat_int32_0_0")).toHaveLength(1);
    const stream = async (base: number) => {
      const values = [0, 1, 2, 3, 4].map((i) => base + i);
      const input = pushable<Parameters<typeof client.modelInfer>[0]>();
      input.push({
        modelName: "repeat_int32",
        inputs: [
          { name: "IN", datatype: "INT32", shape: [5n] },
          { name: "DELAY", datatype: "UINT32", shape: [1n] },
        ],
        rawInputContents: [int32Bytes(values), new Uint8Array(Uint32Array.of(2).buffer)],
      });
      input.end();
      const got: number[] = [];
      for await (const r of client.modelStreamInfer(input)) {
        if (r.errorMessage) throw new Error(r.errorMessage);
        const out = r.inferResponse?.outputs.findIndex((o) => o.name === "OUT") ?? -1;
        if (out >= 0) got.push(...readInt32(r.inferResponse?.rawOutputContents[out]));
      }
      expect(got).toEqual(values);
    };
    await Promise.all([100, 200, 300, 400].map(stream));
  });

  it("an exception in initialize fails the load with the model's message and ends the process", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["init_fails"]);
    const config = join(repo, "init_fails", "config.pbtxt");
    writeFileSync(
      config,
      `${readFileSync(config, "utf8")}\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n` +
        `parameters { key: "SHARED_STUB_PROCESS" value: { string_value: "yes" } }\n`,
    );
    const { client, failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python });
    expect(failedModels).toEqual(["init_fails"]);
    const index = await client.repositoryIndex({});
    expect(index.models.find((m) => m.name === "init_fails")?.reason).toContain(
      "ValueError: initialize refused: no weights",
    );
    await waitFor(() => stubsOf("init_fails_0_0").length === 0, { what: "the failed model's process to end" });
  });

  it("an interpreter without numpy fails the load saying what to install", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["shared_stub"]);
    const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: pythonWithoutNumpy(repo) });
    const reason = (await client.repositoryIndex({})).models.find((m) => m.name === "shared_stub")?.reason ?? "";
    expect(reason).toContain("the Python backend needs numpy in");
    await waitFor(() => stubsOf("shared_stub_0_0").length === 0, { what: "the process to end" });
  });

  it("refuses a value other than yes and no", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["shared_stub"]);
    const config = join(repo, "shared_stub", "config.pbtxt");
    writeFileSync(config, readFileSync(config, "utf8").replace('string_value: "yes"', 'string_value: "maybe"'));
    const lines: string[] = [];
    const log = createLogger({ write: (line) => lines.push(line) });
    const { failedModels } = await startServer({ modelRepositories: [repo], pythonExecutable: python, log });
    expect(failedModels).toEqual(["shared_stub"]);
    expect(lines.some((l) => l.includes("Incorrect value for SHARED_STUB_PROCESS: maybe"))).toBe(true);
  });
});

// What a Python model does to its instance stays in that instance: exceptions fail their
// requests, a dead process fails only what it held and restarts, a failed initialize fails the
// load; nothing is left behind (processes, /dev/shm) after unload, a crash, SIGTERM or SIGKILL.
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { createLogger } from "../src/index.js";
import {
  copyPythonModels,
  pythonPath,
  pythonWithNumpy,
  pythonWithoutNumpy,
  shmLeftovers,
  stubProcesses,
} from "./python-harness.js";
import {
  cleanup,
  expectGrpcError,
  fp32Bytes,
  readFp32,
  readInt32,
  startServer,
  tempRepository,
  waitFor,
} from "./support/harness.js";
import { killChildren, serveArgs, spawnCli } from "./support/process.js";

const python = pythonWithNumpy();

afterEach(async () => {
  killChildren();
  await cleanup();
});

const ours = () => stubProcesses().filter((p) => p.ppid === process.pid);
const shmOf = (pid: number) => shmLeftovers().filter((n) => n.includes(`_${pid}_`));

function int32Request(model: string, value: number) {
  return {
    modelName: model,
    inputs: [{ name: "IN", datatype: "INT32", shape: [1n] }],
    rawInputContents: [new Uint8Array(Int32Array.of(value).buffer)],
  };
}

const addSub = {
  modelName: "add_sub",
  inputs: [
    { name: "INPUT0", datatype: "FP32", shape: [4n] },
    { name: "INPUT1", datatype: "FP32", shape: [4n] },
  ],
  rawInputContents: [fp32Bytes([1, 2, 3, 4]), fp32Bytes([1, 1, 1, 1])],
};

async function pythonServer(
  models: string[],
  setup: (repo: string) => void = () => undefined,
  options: Parameters<typeof startServer>[0] = {},
) {
  const repo = tempRepository();
  copyPythonModels(repo, models);
  setup(repo);
  const running = await startServer({ modelRepositories: [repo], pythonExecutable: python, ...options });
  return { ...running, repo };
}

/** A logger that prints nothing; `seen(pattern)` resolves once a line matching it is logged. */
function watchedLog() {
  const waiting = new Map<RegExp, () => void>();
  const log = createLogger({
    write: (line) => {
      for (const [pattern, resolve] of waiting) if (pattern.test(line)) resolve();
    },
  });
  return { log, seen: (pattern: RegExp) => new Promise<void>((resolve) => waiting.set(pattern, resolve)) };
}

/** What the request after a stub's death gets, in Triton's words (it starts a new stub). */
const UNHEALTHY =
  "Failed to process the request(s) for model instance 'fragile_0', message: Stub process 'fragile_0' is not healthy.";

describe("errors in a Python model's execute", () => {
  it("an exception fails that batch with Triton's text; the instance goes on", async () => {
    const { client } = await pythonServer(["fragile"]);
    const error = await expectGrpcError(
      client.modelInfer(int32Request("fragile", -1)),
      Code.Internal,
      /^Failed to process the request\(s\) for model instance 'fragile_0', message: ValueError: asked to fail\n\nAt:\n {2}.*model\.py\(\d+\): execute$/,
    );
    expect(error.rawMessage).not.toContain("galley_python_stub");
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it("a response's TritonError fails that request with its message and code", async () => {
    const { client } = await pythonServer(["fragile"]);
    await expectGrpcError(client.modelInfer(int32Request("fragile", -2)), Code.InvalidArgument, "bad input");
  });

  it("an output of another datatype than the config's comes back as made; a wrong number of responses fails", async () => {
    const { client } = await pythonServer(["fragile"]);
    // A float32 into a TYPE_INT32 output: Triton returns the tensor as the model made it.
    const made = await client.modelInfer(int32Request("fragile", -5));
    expect(made.outputs.map((o) => [o.name, o.datatype, o.shape])).toEqual([["OUT", "FP32", [1n]]]);
    expect(new Float32Array((made.rawOutputContents[0] as Uint8Array).slice().buffer)).toEqual(Float32Array.of(1.5));
    await expectGrpcError(
      client.modelInfer(int32Request("fragile", -6)),
      Code.Internal,
      /Number of InferenceResponse objects do not match with number of InferenceRequest objects/,
    );
    expect(readInt32((await client.modelInfer(int32Request("fragile", 5))).rawOutputContents[0])).toEqual([6]);
  });

  it("a response that lists an output twice fails that request", async () => {
    const { client } = await pythonServer(["fragile"]);
    await expectGrpcError(
      client.modelInfer(int32Request("fragile", -11)),
      Code.Internal,
      "model 'fragile' produced the output 'OUT' more than once",
    );
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it("a non-decoupled model may answer through the response sender (one final response) and return None", async () => {
    const { client } = await pythonServer(["fragile"]);
    expect(readInt32((await client.modelInfer(int32Request("fragile", -7))).rawOutputContents[0])).toEqual([-70]);
  });
});

describe("a Python process that dies", () => {
  it.each([
    [-3, "exited with code 3"],
    [-4, "was killed by SIGKILL"],
  ])(
    "IN=%i: only its request fails (%s); as in Triton the next request restarts the stub; other models keep serving",
    async (n, what) => {
      const { client } = await pythonServer(["fragile", "add_sub"]);
      const before = ours().map((p) => p.pid);
      const neighbour = Promise.all(Array.from({ length: 10 }, () => client.modelInfer(addSub)));
      await expectGrpcError(
        client.modelInfer(int32Request("fragile", n)),
        Code.Internal,
        `model instance 'fragile_0' ${what}`,
      );
      expect((await neighbour).map((r) => readFp32(r.rawOutputContents[0]))).toEqual(Array(10).fill([2, 3, 4, 5]));
      // Not ready until a request comes: that one fails in Triton's words and starts a new stub.
      expect((await client.modelReady({ name: "fragile" })).ready).toBe(false);
      await expectGrpcError(client.modelInfer(int32Request("fragile", 41)), Code.Internal, UNHEALTHY);
      expect(readInt32((await client.modelInfer(int32Request("fragile", 41))).rawOutputContents[0])).toEqual([42]);
      const after = ours().map((p) => p.pid);
      expect(after).toHaveLength(2);
      expect(after.filter((pid) => !before.includes(pid))).toHaveLength(1);
      expect((await client.modelReady({ name: "fragile" })).ready).toBe(true);
      // Every segment is unlinked once both sides hold it; the dead stub's are gone too.
      expect(shmOf(process.pid)).toEqual([]);
    },
  );

  it("a process the model forked neither delays the crash's detection nor outlives the stub", async () => {
    const { client } = await pythonServer(["fragile"]);
    const forked = readInt32((await client.modelInfer(int32Request("fragile", -8))).rawOutputContents[0])[0] ?? 0;
    expect(existsSync(`/proc/${forked}`)).toBe(true);
    await expectGrpcError(client.modelInfer(int32Request("fragile", -3)), Code.Internal, /exited with code 3/);
    const gone = () => {
      try {
        return readFileSync(`/proc/${forked}/stat`, "utf8").split(") ")[1]?.startsWith("Z") ?? true;
      } catch {
        return true;
      }
    };
    await waitFor(gone, { what: "the forked process to be killed with the stub's group" });
    await expectGrpcError(client.modelInfer(int32Request("fragile", 1)), Code.Internal, UNHEALTHY);
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it("an execute past execute_timeout_ms ends the process; the next request restarts it", async () => {
    const { client } = await pythonServer(["fragile"], (dir) => {
      const config = join(dir, "fragile", "config.pbtxt");
      writeFileSync(
        config,
        `${readFileSync(config, "utf8")}\nparameters { key: "execute_timeout_ms" value: { string_value: "300" } }\n`,
      );
    });
    await expectGrpcError(
      client.modelInfer(int32Request("fragile", -9)),
      Code.Internal,
      "model instance 'fragile_0' did not finish execute within 300 ms (execute_timeout_ms)",
    );
    await expectGrpcError(client.modelInfer(int32Request("fragile", 1)), Code.Internal, UNHEALTHY);
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it("readiness follows the instance: not ready once its stub died and while restarts fail, ready again once one starts", async () => {
    const { client, repo } = await pythonServer(["flaky"], (dir) => {
      const config = join(dir, "flaky", "config.pbtxt");
      writeFileSync(config, readFileSync(config, "utf8").replace("BLOCK_FILE", join(dir, "block")));
    });
    const first = readInt32((await client.modelInfer(int32Request("flaky", 1))).rawOutputContents[0])[0];
    writeFileSync(join(repo, "block"), "");
    await expectGrpcError(client.modelInfer(int32Request("flaky", -1)), Code.Internal, /exited with code 7/);
    expect((await client.modelReady({ name: "flaky" })).ready).toBe(false);
    expect((await client.serverReady({})).ready).toBe(false);
    const unhealthy =
      "Failed to process the request(s) for model instance 'flaky_0', message: Stub process 'flaky_0' is not healthy.";
    // Each request restarts the stub (as Triton's); while initialize raises, each restart fails.
    await expectGrpcError(client.modelInfer(int32Request("flaky", 1)), Code.Internal, unhealthy);
    await waitFor(async () => !(await client.modelReady({ name: "flaky" })).ready, { what: "the restart to fail" });
    await expectGrpcError(client.modelInfer(int32Request("flaky", 1)), Code.Internal, /initialize|flaky_0/);
    rmSync(join(repo, "block"));
    await waitFor(
      async () => {
        await client.modelInfer(int32Request("flaky", 1)).catch(() => undefined);
        return (await client.modelReady({ name: "flaky" })).ready;
      },
      { what: "ready again" },
    );
    const second = readInt32((await client.modelInfer(int32Request("flaky", 1))).rawOutputContents[0])[0];
    expect(second).not.toBe(first);
    expect(shmOf(process.pid)).toEqual([]);
  });
});

describe("loading and unloading", () => {
  it("an exception in initialize fails the load with the model's message; the server serves the rest", async () => {
    const { client, failedModels } = await pythonServer(["init_fails", "add_sub"]);
    expect(failedModels).toEqual(["init_fails"]);
    const index = await client.repositoryIndex({});
    const reason = index.models.find((m) => m.name === "init_fails")?.reason ?? "";
    expect(reason).toContain("ValueError: initialize refused: no weights");
    expect(reason).toMatch(/At:\n {2}.*init_fails\/1\/model\.py\(3\): initialize/);
    expect(readFp32((await client.modelInfer(addSub)).rawOutputContents[0])).toEqual([2, 3, 4, 5]);
    await waitFor(() => ours().length === 1, { what: "the failed model's process to end" });
  });

  it("an unload waits --exit-timeout-secs for an execute that never returns, then kills its stub; a load works again", async () => {
    const { log, seen } = watchedLog();
    const { client } = await pythonServer(["fragile"], undefined, {
      exitTimeoutSecs: 1,
      controlMode: "explicit",
      loadModels: ["fragile"],
      log,
    });
    const spinning = seen(/fragile_0: spinning/);
    // The model ignores SIGTERM: the stub goes only with the SIGKILL that follows 2 s later.
    const stuck = expectGrpcError(
      client.modelInfer(int32Request("fragile", -10)),
      Code.Internal,
      "model instance 'fragile_0' was unloaded before its execute returned",
    );
    await spinning;
    const stubs = ours();
    expect(stubs).toHaveLength(1);
    const start = performance.now();
    await client.repositoryModelUnload({ modelName: "fragile" });
    const seconds = (performance.now() - start) / 1000;
    expect(seconds).toBeGreaterThanOrEqual(0.9);
    expect(seconds).toBeLessThan(6);
    await stuck;
    expect(existsSync(`/proc/${stubs[0]?.pid}`)).toBe(false);
    expect(shmOf(process.pid)).toEqual([]);
    await client.repositoryModelLoad({ modelName: "fragile" });
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
  });

  it("refuses a default_model_filename outside the version folder and a packed EXECUTION_ENV_PATH", async () => {
    const { client } = await pythonServer(["add_sub", "fragile"], (dir) => {
      writeFileSync(
        join(dir, "add_sub", "config.pbtxt"),
        `${readFileSync(join(dir, "add_sub", "config.pbtxt"), "utf8")}\ndefault_model_filename: "../../fragile/1/model.py"\n`,
      );
      writeFileSync(
        join(dir, "fragile", "config.pbtxt"),
        `${readFileSync(join(dir, "fragile", "config.pbtxt"), "utf8")}\nparameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n`,
      );
    });
    const index = await client.repositoryIndex({});
    expect(index.models.find((m) => m.name === "add_sub")?.reason).toMatch(/default_model_filename .*(inside|outside)/);
    expect(index.models.find((m) => m.name === "fragile")?.reason).toContain("is a packed environment");
  });

  it("follows a model.py symlink inside the model's folder, not one leading outside it", async () => {
    const { symlinkSync, renameSync } = await import("node:fs");
    const { client } = await pythonServer(["add_sub", "fragile"], (dir) => {
      renameSync(join(dir, "add_sub", "1", "model.py"), join(dir, "add_sub", "shared.py"));
      symlinkSync(join(dir, "add_sub", "shared.py"), join(dir, "add_sub", "1", "model.py"));
      rmSync(join(dir, "fragile", "1", "model.py"));
      symlinkSync(join(dir, "add_sub", "shared.py"), join(dir, "fragile", "1", "model.py"));
    });
    expect(readFp32((await client.modelInfer(addSub)).rawOutputContents[0])).toEqual([2, 3, 4, 5]);
    const index = await client.repositoryIndex({});
    expect(index.models.find((m) => m.name === "fragile")?.reason).toContain("leads outside the model's folder");
  });

  it("runs a model in its EXECUTION_ENV_PATH environment (bin/python3), which must stay in the model folder", async () => {
    const { client } = await pythonServer(["fragile", "add_sub"], (dir) => {
      mkdirSync(join(dir, "fragile", "env", "bin"), { recursive: true });
      writeFileSync(join(dir, "fragile", "env", "bin", "python3"), `#!/bin/sh\nexec ${pythonPath()} "$@"\n`, {
        mode: 0o755,
      });
      const config = join(dir, "fragile", "config.pbtxt");
      writeFileSync(
        config,
        `${readFileSync(config, "utf8")}\nparameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }\n`,
      );
      const outside = join(dir, "add_sub", "config.pbtxt");
      writeFileSync(
        outside,
        `${readFileSync(outside, "utf8")}\nparameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/../fragile/env" } }\n`,
      );
    });
    expect(readInt32((await client.modelInfer(int32Request("fragile", 1))).rawOutputContents[0])).toEqual([2]);
    const index = await client.repositoryIndex({});
    expect(index.models.find((m) => m.name === "add_sub")?.reason).toContain("leads outside the model's folder");
  });

  it("says what to install when the interpreter is missing", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["add_sub"]);
    const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: "/nonexistent/python3" });
    const reason = (await client.repositoryIndex({})).models[0]?.reason ?? "";
    expect(reason).toContain("install python3 with numpy, or pass --backend-config python,python-executable=<path>");
  });
});

describe("an interpreter without numpy", () => {
  it("fails the load saying what to install", async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["add_sub"]);
    const { client } = await startServer({ modelRepositories: [repo], pythonExecutable: pythonWithoutNumpy(repo) });
    const reason = (await client.repositoryIndex({})).models.find((m) => m.name === "add_sub")?.reason ?? "";
    expect(reason).toContain("the Python backend needs numpy in");
    expect(reason).toContain("--backend-config python,python-executable=<path>");
  });
});

describe("galley serve with Python models", () => {
  async function serve() {
    const repo = tempRepository();
    copyPythonModels(repo, ["add_sub", "identity"]);
    const cli = spawnCli([
      "serve",
      "--model-repository",
      repo,
      "--http-port",
      "0",
      "--grpc-port",
      "0",
      "--metrics-port",
      "0",
      "--backend-config",
      `python,python-executable=${python}`,
    ]);
    await cli.waitFor(/Started GRPCInferenceService at (\S+)/);
    const pid = cli.child.pid ?? 0;
    const stubs = stubProcesses().filter((p) => p.ppid === pid);
    expect(stubs).toHaveLength(2);
    return { cli, pid, stubs };
  }

  // The unload alone waits --exit-timeout-secs (2 s) and then the stub's SIGKILL grace (2 s).
  it("unloads a model whose execute never returns, loads it again, and exits 0 at SIGTERM", {
    timeout: 30_000,
  }, async () => {
    const repo = tempRepository();
    copyPythonModels(repo, ["fragile"]);
    const cli = spawnCli(
      serveArgs(repo, [
        "--model-control-mode=explicit",
        "--load-model=fragile",
        "--exit-timeout-secs=2",
        "--backend-config",
        `python,python-executable=${python}`,
      ]),
    );
    const url = `http://${(await cli.waitFor(/Started HTTPService at (\S+)/))[1]}`;
    const infer = (value: number) =>
      fetch(`${url}/v2/models/fragile/infer`, {
        method: "POST",
        body: JSON.stringify({ inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [value] }] }),
      });
    const stuck = infer(-10);
    await cli.waitFor(/fragile_0: spinning/);
    const [stub] = stubProcesses().filter((p) => p.ppid === cli.child.pid);
    expect((await fetch(`${url}/v2/repository/models/fragile/unload`, { method: "POST" })).status).toBe(200);
    const failed = await stuck;
    expect(failed.status).toBe(500);
    expect(await failed.json()).toEqual({
      error: "model instance 'fragile_0' was unloaded before its execute returned",
    });
    expect(existsSync(`/proc/${stub?.pid}`)).toBe(false);
    expect((await fetch(`${url}/v2/repository/models/fragile/load`, { method: "POST" })).status).toBe(200);
    expect(((await (await infer(1)).json()) as { outputs: { data: number[] }[] }).outputs[0]?.data).toEqual([2]);
    const start = performance.now();
    cli.child.kill("SIGTERM");
    expect(await cli.exited).toBe(0);
    expect((performance.now() - start) / 1000).toBeLessThan(2);
  });

  it.each(["SIGTERM", "SIGKILL"] as const)("leaves no stub process and no shared memory after %s", async (signal) => {
    const { cli, pid, stubs } = await serve();
    cli.child.kill(signal);
    await cli.exited;
    await waitFor(() => stubs.every((s) => !existsSync(`/proc/${s.pid}`)), { what: "the stubs to exit" });
    expect(shmOf(pid)).toEqual([]);
  });
});

// `galley serve` as a real process: it starts, logs where it listens, answers, and exits 0 on
// SIGTERM after draining.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, watch, writeFileSync } from "node:fs";
import module from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";

const cli = fileURLToPath(new URL("../dist/cli/galley.js", import.meta.url));
const children: ChildProcess[] = [];

afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
});

function start(args: string[], env: NodeJS.ProcessEnv = process.env) {
  const child = spawn(process.execPath, [cli, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let output = "";
  child.stdout?.on("data", (chunk) => {
    output += chunk;
  });
  child.stderr?.on("data", (chunk) => {
    output += chunk;
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  /** Resolves with the first match of `pattern` in the output, waiting on output events. */
  const waitFor = (pattern: RegExp) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        const match = output.match(pattern);
        if (match) {
          resolve(match);
          return true;
        }
        return false;
      };
      if (check()) return;
      const onData = () => {
        if (check()) {
          child.stderr?.off("data", onData);
          child.stdout?.off("data", onData);
        }
      };
      child.stderr?.on("data", onData);
      child.stdout?.on("data", onData);
      child.once("exit", () => {
        if (!check()) reject(new Error(`exited before ${pattern}; output:\n${output}`));
      });
    });
  return { child, exited, waitFor, output: () => output };
}

/** Resolves with the first match of `pattern` in `file`, reading it again at each change of its folder. */
function waitForFile(file: string, pattern: RegExp, exited: Promise<unknown>): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const match = existsSync(file) ? readFileSync(file, "utf8").match(pattern) : null;
      if (match) {
        watcher.close();
        resolve(match);
      }
      return match;
    };
    const watcher = watch(join(file, ".."), () => check());
    exited.then(() => {
      if (!check()) {
        watcher.close();
        reject(new Error(`exited before ${pattern} was in ${file}`));
      }
    });
    check();
  });
}

describe("galley serve (process)", () => {
  it("starts on free ports, answers health over HTTP, and exits 0 on SIGTERM", async () => {
    const repo = mkdtempSync(join(tmpdir(), "galley-repo-"));
    const run = start([
      "serve",
      "--model-repository",
      repo,
      "--http-address=127.0.0.1",
      "--http-port=0",
      "--grpc-address=127.0.0.1",
      "--grpc-port=0",
      "--metrics-port=0",
    ]);
    const [, httpAddress] = await run.waitFor(/Started HTTPService at (\S+)/);
    await run.waitFor(/Started GRPCInferenceService at (\S+)/);
    const res = await fetch(`http://${httpAddress}/v2/health/ready`);
    expect(res.status).toBe(200);
    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    expect(run.output()).toMatch(/Server stopped/);
  });

  it("caps V8's young generation: restarts itself once with the flag unless NODE_OPTIONS sizes it", async () => {
    const repo = mkdtempSync(join(tmpdir(), "galley-repo-"));
    const args = ["serve", "--model-repository", repo, "--http-port=0", "--grpc-port=0", "--metrics-port=0"];
    /** The server's command line once it serves (the same pid after a restart in place). */
    const commandLine = async (env: NodeJS.ProcessEnv) => {
      const run = start(args, env);
      await run.waitFor(/Started HTTPService at (\S+)/);
      const line = readFileSync(`/proc/${run.child.pid}/cmdline`, "utf8").split("\0");
      run.child.kill("SIGTERM");
      expect(await run.exited).toBe(0);
      return line;
    };
    const { NODE_OPTIONS: _, ...inherited } = process.env;
    // Node 20 has no process.execve: it keeps V8's sizing unless given the flag.
    const canRestart = typeof (process as { execve?: unknown }).execve === "function";
    const plain = await commandLine(inherited);
    expect(plain.includes("--max-semi-space-size=8")).toBe(canRestart);
    expect(plain).toContain(cli);
    const sized = await commandLine({ ...inherited, NODE_OPTIONS: "--max-semi-space-size=16" });
    expect(sized.some((arg) => arg.startsWith("--max-semi-space-size"))).toBe(false);
  });

  it("exits 1 with a clear message when the repository does not exist", async () => {
    const run = start([
      "serve",
      "--model-repository",
      "/no/such/repository",
      "--http-port=0",
      "--grpc-port=0",
      "--metrics-port=0",
    ]);
    expect(await run.exited).toBe(1);
    expect(run.output()).toMatch(/failed to stat model repository path '\/no\/such\/repository'/);
  });

  it("starts with Triton's Python backend settings, logging them as unused; a value Triton refuses is a usage error", async () => {
    const repo = mkdtempSync(join(tmpdir(), "galley-repo-"));
    const run = start([
      "serve",
      "--model-repository",
      repo,
      "--http-address=127.0.0.1",
      "--http-port=0",
      "--grpc-address=127.0.0.1",
      "--grpc-port=0",
      "--metrics-port=0",
      "--backend-config=python,shm-default-byte-size=16777216",
      "--backend-config=python,shm-growth-byte-size=1048576",
      "--backend-config=python,stub-timeout-seconds=120",
      "--backend-config=python,shm-message-queue-size=2000",
    ]);
    await run.waitFor(/Started HTTPService at (\S+)/);
    expect(run.output()).toMatch(
      /--backend-config python,stub-timeout-seconds=120: accepted, but Galley's Python backend does not use it/,
    );
    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    rmSync(repo, { recursive: true, force: true });
    const bad = start(["serve", "--model-repository=/tmp", "--backend-config=python,stub-timeout-seconds=0"]);
    expect(await bad.exited).toBe(1);
    expect(bad.output()).toMatch(/stub-timeout-seconds can't be smaller than or equal to zero\./);
  });

  it("writes its log to --log-file (appending, as tritonserver), not to stderr, and reports it in /v2/logging", async () => {
    const repo = mkdtempSync(join(tmpdir(), "galley-repo-"));
    const logs = mkdtempSync(join(tmpdir(), "galley-logs-"));
    const file = join(logs, "server.log");
    writeFileSync(file, "an earlier run's line\n");
    const run = start([
      "serve",
      "--model-repository",
      repo,
      "--http-address=127.0.0.1",
      "--http-port=0",
      "--grpc-address=127.0.0.1",
      "--grpc-port=0",
      "--metrics-port=0",
      `--log-file=${file}`,
      "--log-verbose=true",
      "--cuda-memory-pool-byte-size=0:67108864",
    ]);
    const [, httpAddress] = await waitForFile(file, /Started HTTPService at (\S+)/, run.exited);
    const logging = await (await fetch(`http://${httpAddress}/v2/logging`)).json();
    expect(logging).toMatchObject({ log_file: file, log_verbose_level: 1 });
    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    const text = readFileSync(file, "utf8");
    expect(text.startsWith("an earlier run's line\n")).toBe(true);
    expect(text).toMatch(
      /^W\d{4} [\d:.]+ \d+ galley\] --cuda-memory-pool-byte-size=0:67108864: accepted, not used by Galley/m,
    );
    expect(text).toMatch(/Server stopped/);
    // Nothing of the log reaches the console.
    expect(run.output()).not.toMatch(/Started HTTPService|accepted, not used|Server stopped/);

    const unwritable = start([
      "serve",
      "--model-repository",
      repo,
      `--log-file=${join(logs, "no", "such", "dir.log")}`,
    ]);
    expect(await unwritable.exited).toBe(1);
    expect(unwritable.output()).toMatch(/error: failed to open log file '.*dir\.log': ENOENT/);
    rmSync(repo, { recursive: true, force: true });
    rmSync(logs, { recursive: true, force: true });
  });

  it("loads a model that failed to load again with --model-load-retry-count, and drops nv_cpu_* with --allow-cpu-metrics=false", async () => {
    const repo = mkdtempSync(join(tmpdir(), "galley-repo-"));
    mkdirSync(join(repo, "flaky", "1"), { recursive: true });
    writeFileSync(
      join(repo, "flaky", "config.pbtxt"),
      'name: "flaky"\nbackend: "js"\ninput [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]\n' +
        'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]\n',
    );
    // Its first initialize fails (leaving a mark), the next one succeeds.
    writeFileSync(
      join(repo, "flaky", "1", "model.mjs"),
      `import { existsSync, writeFileSync } from "node:fs";
export default class Flaky {
  initialize(args) {
    const mark = args.model_repository + "/tried";
    if (!existsSync(mark)) { writeFileSync(mark, ""); throw new Error("first load fails"); }
  }
  execute(requests) { return requests.map((r) => ({ outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: r.input("IN").typed() }] })); }
}
`,
    );
    const common = ["serve", "--model-repository", repo, "--http-address=127.0.0.1", "--http-port=0", "--grpc-port=0"];
    const once = start([...common, "--metrics-port=0"]);
    expect(await once.exited).toBe(1);
    expect(once.output()).toMatch(/failed to load model\(s\): flaky/);
    rmSync(join(repo, "flaky", "tried"));
    const run = start([
      ...common,
      "--metrics-address=127.0.0.1",
      "--metrics-port=0",
      "--model-load-retry-count=1",
      "--allow-cpu-metrics=false",
    ]);
    const [, metricsAddress] = await run.waitFor(/Started Metrics Service at (\S+)/);
    const [, httpAddress] = await run.waitFor(/Started HTTPService at (\S+)/);
    expect(run.output()).toMatch(
      /failed to load 'flaky' version 1: .*first load fails.*; retrying \(1 of --model-load-retry-count 1\)/,
    );
    expect((await fetch(`http://${httpAddress}/v2/models/flaky/ready`)).status).toBe(200);
    const metrics = await (await fetch(`http://${metricsAddress}/metrics`)).text();
    expect(metrics).toMatch(/^nv_inference_count\{/m);
    expect(metrics).not.toMatch(/nv_cpu_/);
    run.child.kill("SIGTERM");
    expect(await run.exited).toBe(0);
    rmSync(repo, { recursive: true, force: true });
  });

  it("refuses --grpc-use-ssl rather than serving plaintext to a client that asked for TLS", async () => {
    const run = start(["serve", "--model-repository=/tmp", "--grpc-use-ssl=true", "--grpc-server-cert=/c.pem"]);
    expect(await run.exited).toBe(1);
    expect(run.output()).toMatch(/error: --grpc-use-ssl: TLS is not supported by Galley's gRPC endpoint/);
  });

  it("exits 1 with usage on an unknown flag or command", async () => {
    const flag = start(["serve", "--model-repository=/tmp", "--bogus"]);
    expect(await flag.exited).toBe(1);
    expect(flag.output()).toMatch(/Usage: galley serve/);
    const command = start(["bogus"]);
    expect(await command.exited).toBe(1);
    expect(command.output()).toMatch(/unknown command 'bogus'/);
  });

  it("runs `galley config validate` on a repository and exits 1 with Triton's message for a bad model", async () => {
    const repo = mkdtempSync(join(tmpdir(), "galley-repo-"));
    mkdirSync(join(repo, "bad", "1"), { recursive: true });
    writeFileSync(join(repo, "bad", "config.pbtxt"), 'backend: "onnxruntime" max_batch_size: -1');
    const run = start(["config", "validate", repo]);
    expect(await run.exited).toBe(1);
    expect(run.output()).toContain("UNAVAILABLE: 'max_batch_size' must be non-negative value for bad");
  });
});

describe("Node's compile cache", () => {
  it("is turned on by galley where Node has one (22 and later), and off with NODE_DISABLE_COMPILE_CACHE=1", () => {
    const nodeHasCache = typeof (module as { enableCompileCache?: unknown }).enableCompileCache === "function";
    for (const disabled of [false, true]) {
      const tmp = mkdtempSync(join(tmpdir(), "galley-compile-cache-"));
      try {
        const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp };
        delete env.NODE_COMPILE_CACHE;
        delete env.NODE_DISABLE_COMPILE_CACHE;
        if (disabled) env.NODE_DISABLE_COMPILE_CACHE = "1";
        const run = spawnSync(process.execPath, [cli, "--help"], { env, encoding: "utf8" });
        expect(run.status, run.stderr).toBe(0);
        const folder = join(tmp, "node-compile-cache");
        const entries = existsSync(folder) ? readdirSync(folder, { recursive: true }).length : 0;
        if (nodeHasCache && !disabled) expect(entries).toBeGreaterThan(20);
        else expect(entries).toBe(0);
      } finally {
        rmSync(tmp, { recursive: true, force: true });
      }
    }
  });
});

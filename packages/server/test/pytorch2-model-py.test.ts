// PyTorch-2 `model.py` models (Triton's PyTorch backend with `runtime: "model.py"`) end to end
// over gRPC, on CPU: the module from model.py, its state dict from model.pt (made here by
// fixtures/pytorch2/make-fixtures.py), torch.compile on and off, batching, a TorchScript model.pt
// through the same runtime, and models and requests refused with clear errors while the others
// keep serving. Needs python3 with numpy and torch 2.x (`node scripts/test-env.mjs`) and a C++
// compiler (torch.compile's inductor on CPU).
import { execFileSync, spawnSync } from "node:child_process";
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { GALLEY_PYTHON_BASED_BACKENDS } from "@galley/config";
import { ModelConfigSchema } from "@galley/proto";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { PYTHON_BASED_BACKENDS_DIR, pythonBasedBackends } from "../src/backend/python/python-backend.js";
import { createPyTorchBackend } from "../src/backend/pytorch/pytorch-backend.js";
import { createLogger } from "../src/base/log.js";
import { backendLibraries } from "../src/cli/backend-libraries.js";
import { pythonWithNumpy } from "./python-harness.js";
import { f32, readF32, tensors } from "./pytorch-support.js";
import {
  CLI,
  cleanup,
  expectGrpcError,
  quietLog,
  recordingLog,
  startServer,
  tempRepository,
} from "./support/harness.js";

const FIXTURES = fileURLToPath(new URL("./fixtures/pytorch2/", import.meta.url));

interface Expected {
  x: number[][];
  y: number[][];
  s: number[][];
}

let weights: string;
let expected: Expected;
beforeAll(() => {
  weights = mkdtempSync(join(tmpdir(), "galley-pytorch2-"));
  execFileSync(pythonWithNumpy(), [join(FIXTURES, "make-fixtures.py"), weights], { stdio: "inherit" });
  expected = JSON.parse(readFileSync(join(weights, "expected.json"), "utf8")) as Expected;
}, 120_000);
afterAll(() => cleanup());
afterEach(cleanup);

/** `<repo>/<name>`: config (backend pytorch, runtime model.py unless `config` says otherwise) and version 1's files. */
function model(repo: string, name: string, config: string, files: Record<string, string> = {}): string {
  const folder = join(repo, name);
  mkdirSync(join(folder, "1"), { recursive: true });
  writeFileSync(join(folder, "config.pbtxt"), config);
  for (const [file, from] of Object.entries(files)) {
    if (file === "model.py") cpSync(join(FIXTURES, from, "model.py"), join(folder, "1", file));
    else copyFileSync(join(weights, from), join(folder, "1", file));
  }
  return folder;
}

const RUNTIME = 'backend: "pytorch"\nruntime: "model.py"\n';
const CPU = "instance_group [ { kind: KIND_CPU } ]\n";
const NO_COMPILE =
  'parameters { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" value { string_value: "{\\"disable\\": true}" } }\n';
const linearConfig = (extra = "") =>
  `${RUNTIME}max_batch_size: 8\n${tensors("input", "INPUT__0:FP32:4")}${tensors("output", "OUTPUT__0:FP32:3", "OUTPUT__1:FP32:1")}${CPU}${extra}`;
const addSubConfig = (extra = "") =>
  `${RUNTIME}${tensors("input", "INPUT0:FP32:4", "INPUT1:FP32:4")}${tensors("output", "OUTPUT0:FP32:4", "OUTPUT1:FP32:4")}${CPU}${extra}`;

function expectClose(actual: number[], want: number[], digits = 4): void {
  expect(actual).toHaveLength(want.length);
  for (const [i, v] of want.entries()) expect(actual[i]).toBeCloseTo(v, digits);
}

/** Rows `from`.. of the fixture's inputs as one FP32 request. */
const rowsRequest = (modelName: string, from: number, count: number) => ({
  modelName,
  inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [BigInt(count), 4n] }],
  rawInputContents: [f32(expected.x.slice(from, from + count).flat())],
});

describe('PyTorch-2 model.py (runtime: "model.py")', () => {
  it("is the pytorch backend's Python-based runtime, as @galley/config lists", () => {
    const shipped = readdirSync(PYTHON_BASED_BACKENDS_DIR).filter((name) =>
      existsSync(join(PYTHON_BASED_BACKENDS_DIR, name, "model.py")),
    );
    expect(shipped).toEqual([...GALLEY_PYTHON_BASED_BACKENDS]);
    const find = pythonBasedBackends(PYTHON_BASED_BACKENDS_DIR, {
      log: quietLog(),
      inference: () => undefined as never,
    });
    expect(find("pytorch")?.name).toBe("pytorch");
    expect(find("../python")).toBeUndefined();
  });

  it("is judged by galley config validate as galley serve loads it (python3 with torch checked)", () => {
    const repo = tempRepository();
    model(repo, "addsub", addSubConfig(NO_COMPILE), { "model.py": "add_sub" });
    model(
      repo,
      "elsewhere",
      `backend: "onnxruntime"\nruntime: "model.py"\n${tensors("input", "X:FP32:4")}${tensors("output", "Y:FP32:4")}`,
    );
    const run = spawnSync(process.execPath, [CLI, "config", "validate", repo], { encoding: "utf8" });
    expect(run.stdout).toMatch(/\| addsub +\| 1 +\| READY/);
    expect(run.stdout).toContain(
      "UNAVAILABLE: unable to find Python backend based backend library 'model.py' for model 'elsewhere', searched: 'onnxruntime/model.py'",
    );
    const { missingLibrary } = backendLibraries({
      "pytorch:model.py": async () => "no torch",
      pytorch: async () => "no libtorch",
    });
    const config = create(ModelConfigSchema, { name: "m", backend: "pytorch", runtime: "model.py" });
    return expect(missingLibrary("pytorch", config)).resolves.toBe("no torch");
  }, 60_000);

  it("is not libtorch's: without runtime model.py, backend pytorch looks for a TorchScript model.pt and says what to set", async () => {
    const repo = tempRepository();
    const folder = model(repo, "py", linearConfig().replace('runtime: "model.py"\n', ""), { "model.py": "linear" });
    // The addon as far as the load needs it before the file: libtorch is there.
    const backend = createPyTorchBackend({
      log: quietLog(),
      torch: async () => ({
        torchSupport: () => ({ available: true, version: "2.13.0" }),
        loadTorchModel: () => Promise.reject(new Error("unreachable")),
      }),
    });
    const config = create(ModelConfigSchema, { name: "py", platform: "pytorch_libtorch", backend: "pytorch" });
    await expect(
      backend.load({ config, version: 1, modelPath: folder, versionPath: join(folder, "1"), log: quietLog() }),
    ).rejects.toThrow(
      `unable to load model 'py', unable to find '${join(folder, "1", "model.pt")}' for model instance 'py' (the version folder holds a model.py: set runtime: "model.py" to serve it as a PyTorch-2 model)`,
    );
  });

  it("serves a module without weights (torch.compile disabled) and one with its model.pt state dict (compiled), with torch's outputs", async () => {
    const repo = tempRepository();
    model(repo, "addsub", addSubConfig(NO_COMPILE), { "model.py": "add_sub" });
    model(repo, "linear", linearConfig("dynamic_batching { max_queue_delay_microseconds: 50000 }\n"), {
      "model.py": "linear",
      "model.pt": "linear.pt",
    });
    const lines: string[] = [];
    const log = createLogger({ verboseLevel: 1, write: (line) => lines.push(line) });
    const { client, server } = await startServer({ modelRepositories: [repo], log });

    const a = [1, 2, 3, 4];
    const b = [0.5, -1, 2, 8];
    const sum = await client.modelInfer({
      modelName: "addsub",
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [4n] },
        { name: "INPUT1", datatype: "FP32", shape: [4n] },
      ],
      rawInputContents: [f32(a), f32(b)],
    });
    expect(sum.outputs.map((o) => [o.name, o.datatype, o.shape])).toEqual([
      ["OUTPUT0", "FP32", [4n]],
      ["OUTPUT1", "FP32", [4n]],
    ]);
    expect(readF32(sum.rawOutputContents[0])).toEqual([1.5, 1, 5, 12]);
    expect(readF32(sum.rawOutputContents[1])).toEqual([0.5, 3, 1, -4]);

    // Three requests at once: the batcher joins them, the runtime runs one batch and splits it.
    const answers = await Promise.all(
      [rowsRequest("linear", 0, 1), rowsRequest("linear", 1, 2), rowsRequest("linear", 3, 3)].map((r) =>
        client.modelInfer(r),
      ),
    );
    let row = 0;
    for (const answer of answers) {
      const rows = Number(answer.outputs[0]?.shape[0]);
      expect(answer.outputs.map((o) => o.shape.slice(1))).toEqual([[3n], [1n]]);
      expectClose(readF32(answer.rawOutputContents[0]), expected.y.slice(row, row + rows).flat());
      expectClose(readF32(answer.rawOutputContents[1]), expected.s.slice(row, row + rows).flat());
      row += rows;
    }
    expect(row).toBe(6);
    const [stats] = (await client.modelStatistics({ name: "linear" })).modelStats;
    expect(stats?.inferenceCount).toBe(6n);
    expect(stats?.executionCount).toBeLessThan(3n);

    // Triton's log lines, and no default_model_filename filled for this runtime (Triton's guard).
    const text = lines.join("\n");
    expect(text).toContain("Torch parallelism settings for 'addsub': NUM_THREADS = 1; NUM_INTEROP_THREADS = 1;");
    expect(text).toContain("'torch.compile' optional parameter(s) for 'addsub': {'disable': True}");
    expect(text).toContain("'torch.compile' optional parameter(s) for 'linear': {}");
    expect(text).toContain("Model parameter file not found for 'addsub'");
    expect(text).not.toContain("Loading 'linear' as TorchScript");
    const config = await client.modelConfig({ name: "linear" });
    expect(config.config?.defaultModelFilename).toBe("");
    expect(config.config?.backend).toBe("pytorch");
    expect(config.config?.runtime).toBe("model.py");
    await server.close();
  }, 300_000);

  it("loads a TorchScript model.pt through the runtime when the version folder has no model.py", async () => {
    const repo = tempRepository();
    model(repo, "scripted", linearConfig(NO_COMPILE), { "model.pt": "scripted.pt" });
    const { log, lines } = recordingLog();
    const { client } = await startServer({ modelRepositories: [repo], log });
    const answer = await client.modelInfer(rowsRequest("scripted", 2, 2));
    expectClose(readF32(answer.rawOutputContents[0]), expected.y.slice(2, 4).flat());
    expect(lines.join("\n")).toContain("Loading 'scripted' as TorchScript");
  }, 120_000);

  it("takes and returns BF16 and FP16 tensors", async () => {
    const repo = tempRepository();
    model(
      repo,
      "bf16",
      `${RUNTIME}max_batch_size: 4\n${tensors("input", "INPUT0:BF16:2", "INPUT1:BF16:2")}${tensors("output", "OUTPUT0:BF16:2", "OUTPUT1:BF16:2")}${CPU}${NO_COMPILE}`,
      { "model.py": "add_sub" },
    );
    model(
      repo,
      "fp16",
      `${RUNTIME}${tensors("input", "INPUT0:FP16:2", "INPUT1:FP16:2")}${tensors("output", "OUTPUT0:FP16:2", "OUTPUT1:FP16:2")}${CPU}${NO_COMPILE}`,
      { "model.py": "add_sub" },
    );
    const { client } = await startServer({ modelRepositories: [repo] });
    // 1, 2 and 2, 0.5 as 16-bit words (BF16: 0x3F80 0x4000, 0x4000 0x3F00; FP16: 0x3C00 0x4000, 0x4000 0x3800).
    const words = (...values: number[]) => new Uint8Array(new Uint16Array(values).buffer);
    const read = (bytes: Uint8Array | undefined) => [...new Uint16Array(new Uint8Array(bytes ?? []).buffer)];
    const bf16 = await client.modelInfer({
      modelName: "bf16",
      inputs: [
        { name: "INPUT0", datatype: "BF16", shape: [1n, 2n] },
        { name: "INPUT1", datatype: "BF16", shape: [1n, 2n] },
      ],
      rawInputContents: [words(0x3f80, 0x4000), words(0x4000, 0x3f00)],
    });
    expect(bf16.outputs.map((o) => o.datatype)).toEqual(["BF16", "BF16"]);
    expect(read(bf16.rawOutputContents[0])).toEqual([0x4040, 0x4020]); // 3, 2.5
    expect(read(bf16.rawOutputContents[1])).toEqual([0xbf80, 0x3fc0]); // -1, 1.5
    const fp16 = await client.modelInfer({
      modelName: "fp16",
      inputs: [
        { name: "INPUT0", datatype: "FP16", shape: [2n] },
        { name: "INPUT1", datatype: "FP16", shape: [2n] },
      ],
      rawInputContents: [words(0x3c00, 0x4000), words(0x4000, 0x3800)],
    });
    expect(fp16.outputs.map((o) => o.datatype)).toEqual(["FP16", "FP16"]);
    expect(read(fp16.rawOutputContents[0])).toEqual([0x4200, 0x4100]); // 3, 2.5
    expect(read(fp16.rawOutputContents[1])).toEqual([0xbc00, 0x3e00]); // -1, 1.5
  }, 120_000);

  it("refuses bad models at load and bad requests at run, with clear errors, while the other models keep serving", async () => {
    const repo = tempRepository();
    model(repo, "good", linearConfig(NO_COMPILE), { "model.py": "linear", "model.pt": "linear.pt" });
    model(repo, "no_file", linearConfig(NO_COMPILE));
    model(repo, "no_module", linearConfig(NO_COMPILE), { "model.py": "no_module" });
    model(repo, "wrong_weights", linearConfig(NO_COMPILE), { "model.py": "linear", "model.pt": "wrong.pt" });
    model(
      repo,
      "bad_compile",
      linearConfig(
        'parameters { key: "TORCH_COMPILE_OPTIONAL_PARAMETERS" value { string_value: "{\\"model\\": 1}" } }\n',
      ),
      { "model.py": "linear" },
    );
    model(
      repo,
      "no_runtime",
      `backend: "onnxruntime"\nruntime: "model.py"\n${tensors("input", "X:FP32:4")}${tensors("output", "Y:FP32:4")}`,
    );
    // The config's inputs do not fit the module: 3 values where Linear(4, 3) takes 4, and INT32.
    model(
      repo,
      "narrow",
      `${RUNTIME}max_batch_size: 8\n${tensors("input", "INPUT__0:FP32:3")}${tensors("output", "OUTPUT__0:FP32:3", "OUTPUT__1:FP32:1")}${CPU}${NO_COMPILE}`,
      { "model.py": "linear", "model.pt": "linear.pt" },
    );
    model(
      repo,
      "ints",
      `${RUNTIME}max_batch_size: 8\n${tensors("input", "INPUT__0:INT32:4")}${tensors("output", "OUTPUT__0:FP32:3", "OUTPUT__1:FP32:1")}${CPU}${NO_COMPILE}`,
      { "model.py": "linear", "model.pt": "linear.pt" },
    );
    model(
      repo,
      "one_output",
      `${RUNTIME}max_batch_size: 8\n${tensors("input", "X:FP32:4")}${tensors("output", "Y:FP32:4", "Z:FP32:4")}${CPU}${NO_COMPILE}`,
      { "model.py": "one_output" },
    );
    model(repo, "no_outputs", `${RUNTIME}${tensors("input", "X:FP32:4")}${CPU}${NO_COMPILE}`, {
      "model.py": "one_output",
    });
    const { client, failedModels } = await startServer({ modelRepositories: [repo] });
    expect([...failedModels].sort()).toEqual([
      "bad_compile",
      "no_file",
      "no_module",
      "no_outputs",
      "no_runtime",
      "wrong_weights",
    ]);
    const index = await client.repositoryIndex({});
    const reason = (name: string) => index.models.find((m) => m.name === name)?.reason ?? "";
    expect(reason("no_file")).toContain(`No model found in ${join(repo, "no_file", "1")}/['model.py', 'model.pt']`);
    expect(reason("no_module")).toContain("TritonModelException: Cannot find a subclass of torch.nn.Module");
    expect(reason("wrong_weights")).toMatch(
      /model\.pt does not hold a state dict for Net: Error\(s\) in loading state_dict for Net:[\s\S]*size mismatch for linear\.weight/,
    );
    expect(reason("no_outputs")).toContain("model 'no_outputs' lists no outputs");
    expect(reason("bad_compile")).toContain("'model' is not an optional parameter for 'torch.compile'");
    expect(reason("no_runtime")).toBe(
      "unable to find Python backend based backend library 'model.py' for model 'no_runtime', searched: 'onnxruntime/model.py'",
    );

    const good = () => client.modelInfer(rowsRequest("good", 0, 2));
    expectClose(readF32((await good()).rawOutputContents[0]), expected.y.slice(0, 2).flat());

    // What the server checks against the config, before the model sees it.
    await expectGrpcError(
      client.modelInfer({
        ...rowsRequest("good", 0, 1),
        inputs: [{ name: "INPUT__0", datatype: "FP64", shape: [1n, 4n] }],
        rawInputContents: [new Uint8Array(32)],
      }),
      Code.InvalidArgument,
      "[request id: <id_unknown>] inference input 'INPUT__0' data-type is 'FP64', but model 'good' expects 'FP32'",
    );
    await expectGrpcError(
      client.modelInfer({
        ...rowsRequest("good", 0, 1),
        inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [1n, 5n] }],
        rawInputContents: [new Uint8Array(20)],
      }),
      Code.InvalidArgument,
      /unexpected shape for input 'INPUT__0' for model 'good'/,
    );
    // What only torch finds: the message names the failure, the instance keeps serving.
    await expectGrpcError(
      client.modelInfer({
        modelName: "narrow",
        inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [1n, 3n] }],
        rawInputContents: [f32([1, 2, 3])],
      }),
      Code.Internal,
      /PyTorch execute failure: mat1 and mat2 shapes cannot be multiplied \(1x3 and 4x3\)/,
    );
    await expectGrpcError(
      client.modelInfer({
        modelName: "ints",
        inputs: [{ name: "INPUT__0", datatype: "INT32", shape: [1n, 4n] }],
        rawInputContents: [new Uint8Array(16)],
      }),
      Code.Internal,
      /PyTorch execute failure: .*(dtype|Int)/,
    );
    await expectGrpcError(
      client.modelInfer({
        modelName: "one_output",
        inputs: [{ name: "X", datatype: "FP32", shape: [1n, 4n] }],
        rawInputContents: [f32([1, 2, 3, 4])],
      }),
      Code.Internal,
      /the model returned 1 output\(s\), the configuration names 2 \(Y, Z\)/,
    );
    const again = await client
      .modelInfer({
        modelName: "narrow",
        inputs: [{ name: "INPUT__0", datatype: "FP32", shape: [1n, 3n] }],
        rawInputContents: [f32([1, 2, 3])],
      })
      .catch((e: Error) => e);
    expect(again).toBeInstanceOf(Error);
    expectClose(readF32((await good()).rawOutputContents[1]), expected.s.slice(0, 2).flat());
    expect((await client.modelReady({ name: "narrow" })).ready).toBe(true);
  }, 300_000);
});

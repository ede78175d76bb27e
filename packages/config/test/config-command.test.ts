// `galley config` in-process, over real files in temporary repositories.
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { type ConfigCommandContext, runConfigCommand } from "../src/index.js";
import { OnnxType, onnxModel } from "./onnx-model.js";

async function run(args: string[], cwd = process.cwd(), context: ConfigCommandContext = {}) {
  let stdout = "";
  let stderr = "";
  const io = {
    stdout: (t: string) => {
      stdout += t;
    },
    stderr: (t: string) => {
      stderr += t;
    },
    cwd,
  };
  const code = await runConfigCommand(args, io, context);
  return { code, stdout, stderr };
}

const addSub = onnxModel({
  inputs: [
    { name: "INPUT0", type: OnnxType.FLOAT, dims: ["batch", 16] },
    { name: "INPUT1", type: OnnxType.FLOAT, dims: ["batch", 16] },
  ],
  outputs: [
    { name: "OUTPUT0", type: OnnxType.FLOAT, dims: ["batch", 16] },
    { name: "OUTPUT1", type: OnnxType.FLOAT, dims: ["batch", 16] },
  ],
});

function repository(models: Record<string, { config?: string; files?: Record<string, Uint8Array | string> }>): string {
  const root = mkdtempSync(join(tmpdir(), "galley-config-"));
  for (const [name, model] of Object.entries(models)) {
    mkdirSync(join(root, name, "1"), { recursive: true });
    if (model.config !== undefined) writeFileSync(join(root, name, "config.pbtxt"), model.config);
    for (const [file, data] of Object.entries(model.files ?? {})) writeFileSync(join(root, name, "1", file), data);
  }
  return root;
}

const io16 = (names: string[], kind: "input" | "output") =>
  names.map((n) => `${kind} { name: "${n}" data_type: TYPE_FP32 dims: [ 16 ] }`).join("\n");

describe("galley config validate", () => {
  const repo = repository({
    auto: { files: { "model.onnx": addSub } },
    configured: {
      config: `max_batch_size: 8\n${io16(["INPUT0", "INPUT1"], "input")}\n${io16(["OUTPUT0", "OUTPUT1"], "output")}`,
      files: { "model.onnx": addSub },
    },
    broken: {
      config: "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 8 ] }",
      files: { "model.onnx": addSub },
    },
    pipeline: {
      config: `platform: "ensemble" max_batch_size: 4
        ${io16(["A", "B"], "input")}
        ${io16(["SUM"], "output")}
        ensemble_scheduling {
          step { model_name: "auto" model_version: -1 input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
                 output_map { key: "OUTPUT0" value: "s" } output_map { key: "OUTPUT1" value: "d" } }
          step { model_name: "configured" model_version: -1 input_map { key: "INPUT0" value: "s" } input_map { key: "INPUT1" value: "d" }
                 output_map { key: "OUTPUT0" value: "SUM" } }
        }`,
    },
    scripted: { config: 'backend: "python"', files: { "model.py": "" } },
    custom: { config: 'backend: "identity"' },
  });

  it("loads every model as tritonserver would, prints Triton's table, and exits 1 when one fails", async () => {
    const { code, stdout } = await run(["validate", repo]);
    expect(code).toBe(1);
    expect(stdout).toMatch(/\| Model +\| Version \| Status/);
    expect(stdout).toMatch(/\| auto +\| 1 +\| READY/);
    expect(stdout).toMatch(/\| configured +\| 1 +\| READY/);
    expect(stdout).toMatch(/\| pipeline +\| 1 +\| READY/);
    expect(stdout).toContain("UNAVAILABLE: dynamic batching preferred size must be <= max batch size for broken");
    expect(stdout).toMatch(/\| scripted +\| 1 +\| READY/);
    expect(stdout).toContain(
      "UNAVAILABLE: unable to find backend library for backend 'identity', try specifying runtime on the model configuration.",
    );
    expect(stdout).toContain("4 of 6 model(s) would load.");
  });

  it("checks one model folder, in the context of its repository", async () => {
    const { code, stdout } = await run(["validate", join(repo, "pipeline")]);
    expect(code).toBe(0);
    expect(stdout).toContain("1 of 1 model(s) would load.");
  });

  it("takes extra backends, strict mode, and the ONNX default max batch size", async () => {
    expect((await run(["validate", join(repo, "custom"), "--backend", "identity"])).code).toBe(0);
    const strict = await run(["validate", join(repo, "auto"), "--disable-auto-complete-config"]);
    expect(strict.code).toBe(1);
    expect(strict.stdout).toContain("failed to read text proto from");
    const batch = await run([
      "validate",
      join(repo, "auto"),
      "--backend-config",
      "onnxruntime,default-max-batch-size=2",
    ]);
    expect(batch.code).toBe(0);
  });

  it("knows every backend the server has: js, onnxruntime, python and pytorch, with --model-config-name", async () => {
    const backends = repository({
      scripted: { config: 'backend: "js"', files: { "model.js": "" } },
      python: { config: 'backend: "python"', files: { "model.py": "" } },
      torch: {
        config: `platform: "pytorch_libtorch" max_batch_size: 8 ${io16(["INPUT__0"], "input")} ${io16(["OUTPUT__0"], "output")}`,
        files: { "model.pt": "" },
      },
    });
    mkdirSync(join(backends, "torch", "configs"));
    writeFileSync(
      join(backends, "torch", "configs", "gpu.pbtxt"),
      `backend: "pytorch" max_batch_size: 8 ${io16(["INPUT__0"], "input")} ${io16(["OUTPUT__0"], "output")}
       instance_group [ { kind: KIND_GPU } ]`,
    );
    const all = await run(["validate", backends]);
    expect(all.stdout).not.toContain("unable to find backend library");
    expect(all.stdout).toContain("3 of 3 model(s) would load.");
    expect(all.code).toBe(0);
    // The GPU variant: the backend is known; only the GPUs decide.
    const gpu = await run(["validate", backends, "--model-config-name", "gpu", "--gpus", "0"]);
    expect(gpu.stdout).toMatch(/\| torch +\| 1 +\| READY/);
    expect(gpu.code).toBe(0);
    const noGpu = await run(["validate", backends, "--model-config-name", "gpu"]);
    expect(noGpu.stdout).not.toContain("unable to find backend library");
    expect(noGpu.stdout).toMatch(
      /\| torch +\| - +\| UNAVAILABLE: instance group torch_0 of model torch has kind KIND_GPU/,
    );
  });

  it("says which library a backend needs, and fails its models where the server's check finds it absent", async () => {
    const backends = repository({
      python: { config: 'backend: "python"', files: { "model.py": "" } },
      torch: { config: `platform: "pytorch_libtorch" ${io16(["X"], "input")} ${io16(["Y"], "output")}` },
      scripted: { config: 'backend: "js"' },
    });
    const asked: string[] = [];
    const context: ConfigCommandContext = {
      missingLibrary: (backend) => {
        asked.push(backend);
        return backend === "pytorch" ? "the torch addon is not built\nbuild it" : undefined;
      },
    };
    const here = await run(["validate", backends], process.cwd(), context);
    expect(here.code).toBe(1);
    expect(here.stdout).toMatch(
      /\| torch +\| - +\| UNAVAILABLE: unable to load model 'torch', the torch addon is not built build it/,
    );
    expect(here.stdout).toMatch(/\| python +\| 1 +\| READY/);
    expect(here.stdout).toContain("Backend 'python' needs python3 with numpy (found here).");
    expect(here.stdout).toContain(
      "Backend 'pytorch' needs libtorch, through the torch addon of @galley/backends-native (missing here).",
    );
    expect(here.stdout).not.toContain("Backend 'js'");
    expect(asked.sort()).toEqual(["js", "python", "pytorch"]);
    // Naming the backend says the server will have it: not checked here.
    const named = await run(["validate", backends, "--backend", "pytorch"], process.cwd(), context);
    expect(named.code).toBe(0);
    expect(named.stdout).toContain("(not checked: named with --backend)");
    // Without the server's checks (the package alone), nothing is claimed about this machine.
    const alone = await run(["validate", backends]);
    expect(alone.code).toBe(0);
    expect(alone.stdout).toContain(
      "Backend 'pytorch' needs libtorch, through the torch addon of @galley/backends-native (not checked here).",
    );
  });

  it("reports a model file that auto-complete needs but cannot find", async () => {
    const empty = repository({ nofile: { config: 'backend: "onnxruntime"' } });
    const { code, stdout } = await run(["validate", empty]);
    expect(code).toBe(1);
    expect(stdout).toMatch(/UNAVAILABLE: unable to find '.*nofile\/1\/model.onnx' for model instance 'nofile'/);
  });

  it("answers usage mistakes with exit 2 and the usage text", async () => {
    const { code, stderr } = await run(["validate"]);
    expect(code).toBe(2);
    expect(stderr).toContain("Usage: galley config validate");
    expect((await run(["validate", repo, "--gpus", "x"])).code).toBe(2);
    expect((await run(["nope"])).code).toBe(2);
  });
});

describe("galley config print", () => {
  const dir = mkdtempSync(join(tmpdir(), "galley-print-"));
  writeFileSync(
    join(dir, "ok.pbtxt"),
    'name: "m"\nmax_batch_size: 8\ninput [ { name: "x", data_type: TYPE_FP32, dims: [ 4 ] } ]',
  );
  writeFileSync(join(dir, "bad.pbtxt"), 'name: "m"\nmax_batch_sise: 8');

  it("prints canonical text and Triton's JSON", async () => {
    const text = await run(["print", "ok.pbtxt"], dir);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("data_type: TYPE_FP32");
    const json = await run(["print", "ok.pbtxt", "--json"], dir);
    expect(JSON.parse(json.stdout)).toMatchObject({ name: "m", max_batch_size: 8, input: [{ dims: [4] }] });
  });

  it("reports a parse error at its line and column", async () => {
    const { code, stderr } = await run(["print", "bad.pbtxt"], dir);
    expect(code).toBe(1);
    expect(stderr).toBe('error: bad.pbtxt:2:1: unknown field "max_batch_sise" for message inference.ModelConfig\n');
  });
});

describe("galley config build", () => {
  const config = fileURLToPath(new URL("../src/index.ts", import.meta.url));
  const module = (body: string) => {
    const dir = mkdtempSync(join(tmpdir(), "galley-build-"));
    writeFileSync(
      join(dir, "models.ts"),
      `import { ensemble, input, modelConfig, output, step } from ${JSON.stringify(config)};\n${body}`,
    );
    return dir;
  };

  it("writes a config.pbtxt per exported config from a TypeScript module", async () => {
    const dir = module(`
      const io = { input: [input("X", "TYPE_FP32", [4])], output: [output("Y", "TYPE_FP32", [4])] };
      export const encoder = modelConfig({ name: "encoder", backend: "onnxruntime", maxBatchSize: 8, ...io, dynamicBatching: {} });
      export default [
        modelConfig({ name: "decoder", backend: "onnxruntime", maxBatchSize: 8, ...io }),
        ensemble({ name: "pipe", maxBatchSize: 8, ...io, steps: [
          step("encoder", { inputs: { X: "X" }, outputs: { Y: "h" } }),
          step("decoder", { inputs: { X: "h" }, outputs: { Y: "Y" } }),
        ] }),
      ];`);
    const { code, stdout } = await run(["build", "models.ts", "--repository", "repo"], dir);
    expect(code).toBe(0);
    expect(stdout.match(/wrote /g)).toHaveLength(3);
    const written = readFileSync(join(dir, "repo", "pipe", "config.pbtxt"), "utf8");
    expect(written).toContain('platform: "ensemble"');
    expect((await run(["validate", join(dir, "repo"), "--any-backend"])).stdout).toContain("pipe");
  });

  it("makes an ensemble's version folder, so what it builds validates", async () => {
    const dir = module(`
      const io = { input: [input("INPUT0", "TYPE_FP32", [16]), input("INPUT1", "TYPE_FP32", [16])],
                   output: [output("OUTPUT0", "TYPE_FP32", [16]), output("OUTPUT1", "TYPE_FP32", [16])] };
      export const first = modelConfig({ name: "first", backend: "onnxruntime", maxBatchSize: 8, ...io });
      export const second = modelConfig({ name: "second", backend: "onnxruntime", maxBatchSize: 8, ...io });
      export const pipe = ensemble({ name: "pipe", maxBatchSize: 8, ...io, steps: [
        step("first", { inputs: { INPUT0: "INPUT0", INPUT1: "INPUT1" }, outputs: { OUTPUT0: "s", OUTPUT1: "d" } }),
        step("second", { inputs: { INPUT0: "s", INPUT1: "d" }, outputs: { OUTPUT0: "OUTPUT0", OUTPUT1: "OUTPUT1" } }),
      ] });`);
    const built = await run(["build", "models.ts", "--repository", "repo"], dir);
    expect(built.code).toBe(0);
    // The composing models' files are the user's to add; the ensemble needs none.
    for (const name of ["first", "second"]) {
      mkdirSync(join(dir, "repo", name, "1"));
      writeFileSync(join(dir, "repo", name, "1", "model.onnx"), addSub);
    }
    const validated = await run(["validate", join(dir, "repo")]);
    expect(validated.stdout).toMatch(/\| pipe +\| 1 +\| READY/);
    expect(validated.stdout).toContain("3 of 3 model(s) would load.");
    expect(validated.code).toBe(0);
    expect(built.stdout).toContain(`made ${join(dir, "repo", "pipe", "1")}`);
    // A rebuild keeps the version folder there; a specific version policy names the folder.
    expect((await run(["build", "models.ts", "--repository", "repo"], dir)).stdout).not.toContain("made ");
    const pinned = module(`
      export const m = modelConfig({ name: "m", backend: "onnxruntime", maxBatchSize: 8,
        input: [input("X", "TYPE_FP32", [4])], output: [output("Y", "TYPE_FP32", [4])] });
      export const e = ensemble({ name: "e", maxBatchSize: 8, versionPolicy: { policyChoice: { case: "specific", value: { versions: [3n] } } },
        input: [input("X", "TYPE_FP32", [4])], output: [output("Y", "TYPE_FP32", [4])],
        steps: [step("m", { inputs: { X: "X" }, outputs: { Y: "Y" } })] });`);
    expect((await run(["build", "models.ts", "--repository", "repo"], pinned)).code).toBe(0);
    expect(existsSync(join(pinned, "repo", "e", "3"))).toBe(true);
  });

  it("writes nothing when a config would not load", async () => {
    const dir = module(`export const bad = modelConfig({ name: "bad", backend: "onnxruntime", maxBatchSize: -1 });`);
    const { code, stderr } = await run(["build", "models.ts", "--repository", "repo"], dir);
    expect(code).toBe(1);
    expect(stderr).toContain("error: bad: 'max_batch_size' must be non-negative value for bad");
    expect(existsSync(join(dir, "repo"))).toBe(false);
  });

  it("prints instead of writing with --dry-run, and rejects a module without configs", async () => {
    const dir = module(`export const m = modelConfig({ name: "m", backend: "onnxruntime" }); export const other = 3;`);
    const dry = await run(["build", "models.ts", "--dry-run"], dir);
    expect(dry.code).toBe(0);
    expect(dry.stdout).toContain('backend: "onnxruntime"');
    expect(existsSync(join(dir, "m"))).toBe(false);
    const none = module("export const nothing = 1;");
    expect((await run(["build", "models.ts"], none)).code).toBe(1);
  });
});

describe("galley config new", () => {
  it("scaffolds a config from an ONNX model, and the result validates", async () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-new-"));
    writeFileSync(join(dir, "add_sub.onnx"), addSub);
    const printed = await run(["new", "add_sub.onnx"], dir);
    expect(printed.code).toBe(0);
    expect(printed.stdout).toContain('name: "add_sub"');
    expect(printed.stdout).toContain("max_batch_size: 4");
    expect(printed.stdout).toContain('name: "INPUT0"');

    const written = await run(
      ["new", "add_sub.onnx", "--name", "simple", "--max-batch-size", "8", "--repository", "repo"],
      dir,
    );
    expect(written.code).toBe(0);
    expect(existsSync(join(dir, "repo", "simple", "1", "model.onnx"))).toBe(true);
    const validated = await run(["validate", join(dir, "repo")]);
    expect(validated.stdout).toMatch(/\| simple \| 1 +\| READY/);
    expect(validated.code).toBe(0);
  });

  it("rejects a file that is not an ONNX model", async () => {
    const dir = mkdtempSync(join(tmpdir(), "galley-new-"));
    writeFileSync(join(dir, "x.onnx"), "not a model");
    const { code, stderr } = await run(["new", "x.onnx"], dir);
    expect(code).toBe(1);
    expect(stderr).toMatch(/x.onnx: not an ONNX model/);
  });
});

// One list of backends: the server registers exactly @galley/config's GALLEY_BACKENDS, checks the
// library of each that needs one, and `galley config validate` judges models as `galley serve` loads them.
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { GALLEY_BACKEND_NAMES, GALLEY_BACKENDS } from "@galley/config";
import { ModelConfigSchema, ModelParameterSchema } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { pythonMissing } from "../src/backend/python/python-backend.js";
import { type TorchSupport, torchMissing } from "../src/backend/pytorch/pytorch-backend.js";
import { BACKEND_LIBRARY_CHECKS, backendLibraries } from "../src/cli/backend-libraries.js";
import { createServer } from "../src/index.js";

const cli = fileURLToPath(new URL("../dist/cli/galley.js", import.meta.url));
const examples = fileURLToPath(new URL("../../../examples/python_model_repository", import.meta.url));

describe("the backends a server has", () => {
  it("are @galley/config's GALLEY_BACKENDS, no more and no fewer", async () => {
    const server = createServer({ http: false, grpc: false, metrics: false });
    try {
      expect([...server.core.models.backends].sort()).toEqual([...GALLEY_BACKEND_NAMES].sort());
    } finally {
      await server.close();
    }
  });

  it("check a library for each backend that needs one, and only those (a platform's own check, `<backend>:<platform>`, too)", () => {
    const needing = GALLEY_BACKENDS.filter((b) => b.needs !== undefined).map((b) => b.name);
    const checked = Object.keys(BACKEND_LIBRARY_CHECKS);
    expect(checked.filter((key) => !key.includes(":")).sort()).toEqual(needing.sort());
    expect(checked.filter((key) => key.includes(":"))).toEqual(["pytorch:torch_aoti", "pytorch:model.py"]);
  });

  it("are checked once each; a Python model with its own environment is left to its load", async () => {
    let calls = 0;
    const { missingLibrary } = backendLibraries({
      pytorch: async () => {
        calls++;
        return "no libtorch";
      },
      python: async () => "no python",
    });
    const config = create(ModelConfigSchema, { name: "m" });
    expect(await missingLibrary("pytorch", config)).toBe("no libtorch");
    expect(await missingLibrary("pytorch", config)).toBe("no libtorch");
    expect(calls).toBe(1);
    expect(await missingLibrary("js", config)).toBeUndefined();
    expect(await missingLibrary("python", config)).toBe("no python");
    const own = create(ModelConfigSchema, {
      name: "m",
      parameters: { EXECUTION_ENV_PATH: create(ModelParameterSchema, { stringValue: "$$TRITON_MODEL_DIRECTORY/env" }) },
    });
    expect(await missingLibrary("python", own)).toBeUndefined();
  });

  it("say what to install, in the words a load fails with", async () => {
    expect(await torchMissing(async () => Promise.reject(new Error("the PyTorch backend needs X")))).toBe(
      "the PyTorch backend needs X",
    );
    const unavailable = { torchSupport: () => ({ available: false, reason: "no libtorch here" }) } as TorchSupport;
    expect(await torchMissing(async () => unavailable)).toBe("no libtorch here");
    expect(await pythonMissing("/nonexistent/python3")).toBe(
      "'/nonexistent/python3' is not found (the Python backend runs '/nonexistent/python3': install python3 with numpy, or pass --backend-config python,python-executable=<path>)",
    );
    expect(await pythonMissing("false")).toMatch(/^'false' cannot import numpy: .* \(the Python backend runs 'false'/);
  });
});

describe("galley config validate (process)", () => {
  const validate = (args: string[], env: NodeJS.ProcessEnv = process.env) =>
    spawnSync(process.execPath, [cli, "config", "validate", ...args], { env, encoding: "utf8" });

  it("loads the Python example repository as galley serve does", () => {
    const run = validate([examples]);
    expect(run.stdout).not.toContain("unable to find backend library");
    expect(run.stdout).toContain("6 of 6 model(s) would load.");
    expect(run.stdout).toContain("Backend 'python' needs python3 with numpy (found here).");
    expect(run.status).toBe(0);
  });

  it("knows PyTorch models, and their GPU variants under --model-config-name", () => {
    const repo = mkdtempSync(join(tmpdir(), "galley-validate-"));
    const io =
      'input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ] output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]';
    mkdirSync(join(repo, "torch", "1"), { recursive: true });
    mkdirSync(join(repo, "torch", "configs"));
    writeFileSync(join(repo, "torch", "1", "model.pt"), "");
    writeFileSync(join(repo, "torch", "config.pbtxt"), `platform: "pytorch_libtorch" max_batch_size: 8 ${io}`);
    writeFileSync(
      join(repo, "torch", "configs", "gpu.pbtxt"),
      `platform: "pytorch_libtorch" max_batch_size: 8 ${io} instance_group [ { kind: KIND_GPU } ]`,
    );
    // Named with --backend: the server will have libtorch, whether or not this machine does.
    const gpu = validate([repo, "--model-config-name", "gpu", "--gpus", "0", "--backend", "pytorch"]);
    expect(gpu.stdout).toMatch(/\| torch +\| 1 +\| READY/);
    expect(gpu.status).toBe(0);
    const here = validate([repo]);
    expect(here.stdout).not.toContain("unable to find backend library");
    expect(here.stdout).toMatch(
      /Backend 'pytorch' needs libtorch, through the torch addon of @galley\/backends-native \((found|missing) here\)/,
    );
  });

  it("fails Python models where python3 is missing, saying what to install, as a load would", () => {
    const run = validate([examples], { ...process.env, PATH: join(tmpdir(), "galley-no-such-folder") });
    expect(run.status).toBe(1);
    expect(run.stdout).toContain(
      "UNAVAILABLE: unable to load model 'add_sub', 'python3' is not found (the Python backend runs 'python3': install python3 with numpy",
    );
    expect(run.stdout).toMatch(/\| simple +\| 1 +\| READY/);
    expect(run.stdout).toContain("Backend 'python' needs python3 with numpy (missing here).");
  });
});

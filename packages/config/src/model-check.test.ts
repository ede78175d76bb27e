import { DataType } from "@galley/proto";
import { describe, expect, it } from "vitest";
import { checkModel, checkRepository, type ModelSource, versionsToLoad } from "./model-check.js";
import { autoCompleteOnnx } from "./onnx-auto-complete.js";
import { parseModelConfig } from "./text-format.js";

const source = (name: string, configText: string | undefined, versions = [1]): ModelSource => ({
  name,
  ...(configText === undefined ? {} : { configText }),
  versions,
  firstVersionEntries: [{ name: "model.onnx", isDirectory: false }],
});
const first = async (s: ModelSource, options = {}) => (await checkModel(s, options)).diagnostics[0]?.message;

const io = `max_batch_size: 8
  input { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }
  output { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }`;

describe("checkModel", () => {
  it("loads an ONNX model with a minimal config and fills what Triton fills", async () => {
    const check = await checkModel(source("simple", io));
    expect(check.diagnostics).toEqual([]);
    expect(check.versions).toEqual([1]);
    expect(check.config).toMatchObject({
      name: "simple",
      backend: "onnxruntime",
      platform: "onnxruntime_onnx",
      defaultModelFilename: "model.onnx",
    });
    expect(check.config?.instanceGroup.map((g) => [g.name, g.count])).toEqual([["simple", 2]]);
  });

  it("reports a parse error with the file, line and column", async () => {
    expect(await first({ ...source("m", 'name: "m"\nmax_batch_sise: 1'), path: "repo/m" })).toBe(
      'failed to read text proto from repo/m/config.pbtxt: 2:1: unknown field "max_batch_sise" for message inference.ModelConfig',
    );
  });

  it("needs a config file in strict mode only", async () => {
    expect(await first(source("m", undefined), { autoComplete: false })).toBe(
      "failed to read text proto from m/config.pbtxt",
    );
    expect((await checkModel(source("m", undefined))).config?.backend).toBe("onnxruntime");
  });

  it("requires the folder name to equal the model name", async () => {
    expect(await first(source("folder", `name: "other" ${io}`))).toBe(
      "unexpected directory name 'folder' for model 'other', directory name must equal model name",
    );
  });

  it("requires a version the policy selects", async () => {
    expect(await first(source("m", io, []))).toBe(
      "at least one version must be available under the version policy of model 'm'",
    );
    expect(await first(source("m", `${io} version_policy { specific { versions: [ 3 ] } }`, [1, 2]))).toBe(
      "at least one version must be available under the version policy of model 'm'",
    );
  });

  it("rejects backends the server lacks and runtimes it cannot find, with Triton's messages", async () => {
    expect(await first(source("m", `backend: "identity" ${io}`), { backends: new Set(["onnxruntime"]) })).toBe(
      "unable to find backend library for backend 'identity', try specifying runtime on the model configuration.",
    );
    expect(await first(source("m", `backend: "identity" runtime: "../x.so" ${io}`))).toMatch(
      /^backend library name '..\/x.so' escapes backend directory/,
    );
    expect(await first(source("m", `backend: "identity" runtime: "libx.so" ${io}`))).toBe(
      "unable to find backend library 'libx.so' for model 'm', searched: 'm/1' 'm' ",
    );
    expect(
      await first(source("m", `backend: "identity" runtime: "libx.so" ${io}`), { runtimeExists: () => true }),
    ).toBeUndefined();
  });

  it("takes runtime model.py for a backend with a Python-based runtime, with Triton's message for one without", async () => {
    const options = {
      backends: new Set(["onnxruntime", "pytorch", "python"]),
      pythonBasedBackends: new Set(["pytorch"]),
    };
    expect(await first(source("m", `backend: "pytorch" runtime: "model.py" ${io}`), options)).toBeUndefined();
    expect(await first(source("m", `backend: "onnxruntime" runtime: "model.py" ${io}`), options)).toBe(
      "unable to find Python backend based backend library 'model.py' for model 'm', searched: 'onnxruntime/model.py'",
    );
  });

  it("checks IO at load in strict mode, and after the backend's auto-complete otherwise", async () => {
    const bad =
      'max_batch_size: 8 input { name: "x" data_type: TYPE_FP32 dims: [ 0 ] } output { name: "y" data_type: TYPE_FP32 dims: [ 1 ] }';
    const message = "model input 'x' dimension must be integer >= 1, or -1 to indicate a variable-size dimension for m";
    expect(await first(source("m", bad), { autoComplete: false })).toBe(message);
    expect(await first(source("m", bad))).toBe(message);
  });

  it("runs the backend's auto-complete and merges what it fills", async () => {
    const check = await checkModel(source("m", ""), {
      backendAutoComplete: (_s, config) =>
        autoCompleteOnnx(config, {
          inputs: [{ name: "x", dataType: DataType.TYPE_FP32, dims: [-1n, 4n] }],
          outputs: [{ name: "y", dataType: DataType.TYPE_FP32, dims: [-1n, 4n] }],
        }),
    });
    expect(check.diagnostics).toEqual([]);
    expect(check.config?.maxBatchSize).toBe(4);
    expect(check.config?.schedulingChoice).toMatchObject({
      case: "dynamicBatching",
      value: { preferredBatchSize: [4] },
    });
    expect(check.config?.input.map((i) => [i.name, i.dims])).toEqual([["x", [4n]]]);
  });

  it("fails a model whose auto-complete fails", async () => {
    const check = await checkModel(source("m", "max_batch_size: 8"), {
      backendAutoComplete: (_s, config) =>
        autoCompleteOnnx(config, { inputs: [{ name: "x", dataType: DataType.TYPE_FP32, dims: [4n] }], outputs: [] }),
    });
    expect(check.diagnostics[0]?.message).toMatch(
      /model does not support batching while non-zero max_batch_size is specified/,
    );
  });
});

describe("versionsToLoad", () => {
  const policy = (text: string) => parseModelConfig(text);
  it("applies latest, all and specific", async () => {
    expect(versionsToLoad(policy(""), [3, 1, 2])).toEqual([3]);
    expect(versionsToLoad(policy("version_policy { latest { num_versions: 2 } }"), [3, 1, 2])).toEqual([2, 3]);
    expect(versionsToLoad(policy("version_policy { all { } }"), [3, 1, 2])).toEqual([1, 2, 3]);
    expect(versionsToLoad(policy("version_policy { specific { versions: [ 1, 5 ] } }"), [3, 1, 2])).toEqual([1]);
  });
});

describe("checkRepository: ensembles", () => {
  const model = (name: string, extra = "") =>
    source(
      name,
      `backend: "identity" max_batch_size: 8 ${extra}
      input { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } output { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }`,
    );
  const ensemble = (steps: string, outputs = "out") =>
    source(
      "ens",
      `platform: "ensemble" max_batch_size: 8
      input { name: "in" data_type: TYPE_FP32 dims: [ 16 ] }
      ${outputs
        .split(",")
        .map((o) => `output { name: "${o}" data_type: TYPE_FP32 dims: [ 16 ] }`)
        .join(" ")}
      ensemble_scheduling { ${steps} }`,
    );
  const step = (model: string, input: string, output: string, version = -1) =>
    `step { model_name: "${model}" model_version: ${version} input_map { key: "IN" value: "${input}" } output_map { key: "OUT" value: "${output}" } }`;

  it("loads a chain and marks it not decoupled", async () => {
    const checks = await checkRepository([
      model("a"),
      model("b"),
      ensemble(step("a", "in", "mid") + step("b", "mid", "out")),
    ]);
    expect(checks.get("ens")?.diagnostics).toEqual([]);
    expect(checks.get("ens")?.config?.modelTransactionPolicy?.decoupled).toBe(false);
  });

  it("becomes decoupled when a step is, whatever its config says", async () => {
    const checks = await checkRepository([
      model("a", "model_transaction_policy { decoupled: true }"),
      ensemble(step("a", "in", "out")),
    ]);
    expect(checks.get("ens")?.diagnostics).toEqual([]);
    expect(checks.get("ens")?.config?.modelTransactionPolicy?.decoupled).toBe(true);
  });

  it("rejects a step fed by two decoupled branches", async () => {
    const dec = "model_transaction_policy { decoupled: true }";
    const join = source(
      "join",
      `backend: "identity" max_batch_size: 8
      input { name: "A" data_type: TYPE_FP32 dims: [ 16 ] } input { name: "B" data_type: TYPE_FP32 dims: [ 16 ] }
      output { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }`,
    );
    const steps = `${step("a", "in", "x")} ${step("b", "in", "y")}
      step { model_name: "join" model_version: -1 input_map { key: "A" value: "x" } input_map { key: "B" value: "y" } output_map { key: "OUT" value: "out" } }`;
    const checks = await checkRepository([model("a", dec), model("b", dec), join, ensemble(steps)]);
    expect(checks.get("ens")?.diagnostics[0]?.message).toBe(
      "in ensemble ens, step of model 'join' receives inputs originated from different decoupled models",
    );
  });

  it("names a missing, an invalid, or an unloaded composing model", async () => {
    expect((await checkRepository([ensemble(step("ghost", "in", "out"))])).get("ens")?.diagnostics[0]?.message).toBe(
      "ensemble ens contains models that are not available or ambiguous: ghost",
    );
    const broken = source("a", 'backend: "identity" max_batch_size: -1');
    expect(
      (await checkRepository([broken, ensemble(step("a", "in", "out"))])).get("ens")?.diagnostics[0]?.message,
    ).toBe(
      "ensemble 'ens' depends on 'a' which is not valid. Model 'a' failed with error: 'max_batch_size' must be non-negative value for a",
    );
    expect(
      (await checkRepository([model("a"), ensemble(step("a", "in", "out", 2))])).get("ens")?.diagnostics[0]?.message,
    ).toBe("ensemble 'ens' depends on 'a' whose required version 2 is not loaded.");
  });

  it("finds a cycle through nested ensembles", async () => {
    const inner = source(
      "inner",
      `platform: "ensemble" max_batch_size: 8
      input { name: "IN" data_type: TYPE_FP32 dims: [ 16 ] } output { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }
      ensemble_scheduling { ${step("ens", "IN", "OUT")} }`,
    );
    const checks = await checkRepository([inner, ensemble(step("inner", "in", "out"))]);
    expect(checks.get("ens")?.diagnostics[0]?.message).toMatch(
      /^circular dependency between ensembles: (ens -> \.\.\. -> inner -> ens|inner -> \.\.\. -> ens -> inner)$/,
    );
    expect(checks.get("inner")?.diagnostics[0]?.message).toMatch(/^circular dependency between ensembles/);
  });

  it("compares shapes with and without the batch dimension, and names the models on a mismatch", async () => {
    const nobatch = source(
      "nb",
      `backend: "identity" max_batch_size: 0
      input { name: "IN" data_type: TYPE_FP32 dims: [ -1, 16 ] } output { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 16 ] }`,
    );
    expect((await checkRepository([nobatch, ensemble(step("nb", "in", "out"))])).get("ens")?.diagnostics).toEqual([]);
    const wrong = source(
      "w",
      `backend: "identity" max_batch_size: 8
      input { name: "IN" data_type: TYPE_FP32 dims: [ 8 ] } output { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }`,
    );
    expect((await checkRepository([wrong, ensemble(step("w", "in", "out"))])).get("ens")?.diagnostics[0]?.message).toBe(
      "in ensemble ens, ensemble tensor in: inconsistent shape: [-1,16] is inferred from model ens while [-1,8] is inferred from model w",
    );
  });
});

import type { ModelConfig } from "@galley/proto";
import type { Diagnostic } from "../diagnostic.js";
import { Backend, Platform } from "./platforms.js";

/** A file or folder in a model's first version folder, for autofill. */
export interface VersionEntry {
  name: string;
  isDirectory: boolean;
}

/**
 * Fill `name`, `backend`, `platform` and `default_model_filename` from each other and from the
 * files of the first version folder, as Triton's `AutoCompleteBackendFields` does (PROTOCOL.md
 * §4.1). Always runs, even with auto-complete disabled. Mutates `config`.
 *
 * @param modelName - the model's folder name.
 * @param firstVersion - the entries of the lexicographically first version folder; undefined if
 *   the model has none.
 */
export function autofillBackendFields(
  config: ModelConfig,
  modelName: string,
  firstVersion: readonly VersionEntry[] | undefined,
): Diagnostic[] {
  if (config.name === "") config.name = modelName;
  const has = (name: string, directory?: boolean) =>
    firstVersion?.some((e) => e.name === name && (directory === undefined || e.isDirectory === directory)) ?? false;
  const scan = firstVersion !== undefined && config.defaultModelFilename === "";

  // TensorFlow
  if (config.platform === "" && (config.backend === "" || config.backend === Backend.tensorflow)) {
    if (config.defaultModelFilename === "model.savedmodel") config.platform = Platform.tensorflowSavedmodel;
    else if (config.defaultModelFilename === "model.graphdef") config.platform = Platform.tensorflowGraphdef;
    else if (scan) {
      if (has("model.savedmodel", true)) config.platform = Platform.tensorflowSavedmodel;
      if (has("model.graphdef", false)) config.platform = Platform.tensorflowGraphdef;
    }
  }
  if (config.platform === Platform.tensorflowSavedmodel || config.platform === Platform.tensorflowGraphdef) {
    if (config.backend === "") config.backend = Backend.tensorflow;
    if (config.defaultModelFilename === "") {
      config.defaultModelFilename =
        config.platform === Platform.tensorflowSavedmodel ? "model.savedmodel" : "model.graphdef";
    }
    return [];
  }

  const bare = config.platform === "" && scan;
  // TensorRT
  if (
    config.backend === "" &&
    (config.platform === Platform.tensorrtPlan ||
      config.defaultModelFilename === "model.plan" ||
      (bare && has("model.plan", false)))
  ) {
    config.backend = Backend.tensorrt;
  }
  if (config.backend === Backend.tensorrt) {
    if (config.platform === "") config.platform = Platform.tensorrtPlan;
    if (config.defaultModelFilename === "") config.defaultModelFilename = "model.plan";
    return [];
  }

  // ONNX Runtime: model.onnx may be a file or a folder holding model.onnx.
  if (
    config.backend === "" &&
    (config.platform === Platform.onnxruntimeOnnx ||
      config.defaultModelFilename === "model.onnx" ||
      (bare && has("model.onnx")))
  ) {
    config.backend = Backend.onnxruntime;
  }
  if (config.backend === Backend.onnxruntime) {
    if (config.platform === "") config.platform = Platform.onnxruntimeOnnx;
    if (config.defaultModelFilename === "") config.defaultModelFilename = "model.onnx";
    return [];
  }

  // OpenVINO (no platform string)
  if (config.backend === "" && (config.defaultModelFilename === "model.xml" || (bare && has("model.xml")))) {
    config.backend = Backend.openvino;
  }
  if (config.backend === Backend.openvino) {
    if (config.defaultModelFilename === "") config.defaultModelFilename = "model.xml";
    return [];
  }

  // PyTorch
  if (config.backend === "") {
    if (
      config.platform === Platform.pytorchLibtorch ||
      config.platform === Platform.libtorch ||
      config.defaultModelFilename === "model.pt"
    ) {
      config.backend = Backend.pytorch;
    } else if (config.platform === Platform.torchAoti || config.defaultModelFilename === "model.pt2") {
      config.backend = Backend.pytorch;
    } else if (bare && has("model.pt", false)) {
      config.backend = Backend.pytorch;
      config.platform = Platform.pytorchLibtorch;
    } else if (bare && has("model.pt2", false)) {
      config.backend = Backend.pytorch;
      config.platform = Platform.torchAoti;
    }
  }
  if (config.backend === Backend.pytorch) {
    if (config.platform === "" && config.defaultModelFilename === "model.pt2") {
      config.platform = Platform.torchAoti;
    } else if (config.platform === "") {
      config.platform = Platform.pytorchLibtorch;
      // Not for the Python-based runtime: its model.py runtime looks for `model.py`, then
      // `model.pt`, and a filled `model.pt` would load a model.py model's weights as TorchScript.
      if (config.defaultModelFilename === "" && config.runtime !== "model.py") config.defaultModelFilename = "model.pt";
    } else if (config.platform === Platform.torchAoti && config.defaultModelFilename === "") {
      config.defaultModelFilename = "model.pt2";
    }
    return [];
  }

  // Python
  if (config.backend === "" && (config.defaultModelFilename === "model.py" || (bare && has("model.py")))) {
    config.backend = Backend.python;
  }
  if (config.backend === Backend.python) {
    if (config.defaultModelFilename === "") config.defaultModelFilename = "model.py";
    return [];
  }

  // A custom backend named by the folder: `x.<backend>` holds `model.<backend>`.
  if (config.backend === "" && config.platform === "" && config.defaultModelFilename === "") {
    const dot = modelName.indexOf(".");
    if (dot === -1) {
      return [
        {
          path: "backend",
          message: `Invalid model name: Could not determine backend for model '${modelName}' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'.`,
        },
      ];
    }
    config.backend = modelName.slice(dot + 1);
    config.defaultModelFilename = `model.${config.backend}`;
  }
  return [];
}

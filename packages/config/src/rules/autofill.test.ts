import { describe, expect, it } from "vitest";
import { parseModelConfig } from "../text-format.js";
import { autofillBackendFields, type VersionEntry } from "./autofill.js";

const file = (name: string): VersionEntry => ({ name, isDirectory: false });
const folder = (name: string): VersionEntry => ({ name, isDirectory: true });

function autofill(text: string, entries?: VersionEntry[], modelName = "m") {
  const config = parseModelConfig(text);
  const diagnostics = autofillBackendFields(config, modelName, entries);
  return {
    name: config.name,
    backend: config.backend,
    platform: config.platform,
    file: config.defaultModelFilename,
    diagnostics,
  };
}

describe("autofillBackendFields (PROTOCOL.md §4.1)", () => {
  it("names the model after its folder", () => {
    expect(autofill('backend: "onnxruntime"', [], "simple").name).toBe("simple");
  });

  it.each([
    ['platform: "onnxruntime_onnx"', [], "onnxruntime", "onnxruntime_onnx", "model.onnx"],
    ['backend: "onnxruntime"', [], "onnxruntime", "onnxruntime_onnx", "model.onnx"],
    ["", [file("model.onnx")], "onnxruntime", "onnxruntime_onnx", "model.onnx"],
    ["", [folder("model.onnx")], "onnxruntime", "onnxruntime_onnx", "model.onnx"],
    ['default_model_filename: "model.onnx"', [], "onnxruntime", "onnxruntime_onnx", "model.onnx"],
    ["", [file("model.plan")], "tensorrt", "tensorrt_plan", "model.plan"],
    ["", [folder("model.savedmodel")], "tensorflow", "tensorflow_savedmodel", "model.savedmodel"],
    ["", [file("model.graphdef")], "tensorflow", "tensorflow_graphdef", "model.graphdef"],
    ["", [file("model.pt")], "pytorch", "pytorch_libtorch", ""],
    ['platform: "torch_aoti"', [], "pytorch", "torch_aoti", "model.pt2"],
    ['backend: "pytorch" platform: "torch_aoti"', [], "pytorch", "torch_aoti", "model.pt2"],
    ["", [file("model.pt2")], "pytorch", "torch_aoti", "model.pt2"],
    ['default_model_filename: "model.pt2"', [], "pytorch", "torch_aoti", "model.pt2"],
    ['backend: "pytorch" default_model_filename: "model.pt2"', [], "pytorch", "torch_aoti", "model.pt2"],
    ['backend: "pytorch"', [], "pytorch", "pytorch_libtorch", "model.pt"],
    // The Python-based runtime: no model.pt filled in, or the runtime would load a model.py's weights as TorchScript.
    ['backend: "pytorch" runtime: "model.py"', [file("model.py"), file("model.pt")], "pytorch", "pytorch_libtorch", ""],
    ["", [file("model.py")], "python", "", "model.py"],
    ["", [file("model.xml"), file("model.bin")], "openvino", "", "model.xml"],
    ['platform: "ensemble"', [], "", "ensemble", ""],
  ] as const)("%s with %j → backend %s, platform %s, file %s", (text, entries, backend, platform, fileName) => {
    expect(autofill(text, [...entries])).toMatchObject({ backend, platform, file: fileName, diagnostics: [] });
  });

  it("takes a custom backend from a folder named model.<backend>", () => {
    expect(autofill("", [], "add.identity")).toMatchObject({ backend: "identity", file: "model.identity" });
    expect(autofill("", [], "a.b.c")).toMatchObject({ backend: "b.c", file: "model.b.c" });
  });

  it("rejects a model whose backend cannot be determined, with Triton's message", () => {
    expect(autofill("", [file("weights.bin")], "mystery").diagnostics).toEqual([
      {
        path: "backend",
        message:
          "Invalid model name: Could not determine backend for model 'mystery' with no backend in model configuration. Expected model name of the form 'model.<backend_name>'.",
      },
    ]);
  });

  it("leaves an explicit custom backend alone", () => {
    expect(autofill('backend: "identity"', [file("model.onnx")])).toMatchObject({
      backend: "identity",
      platform: "",
      file: "",
    });
  });
});

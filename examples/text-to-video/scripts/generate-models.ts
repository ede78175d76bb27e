// Writes the three UNTRAINED networks of the text-to-video example as ONNX (opset 17): the text
// encoder (a 2-layer transformer), the denoiser (a small convolutional UNet-like network with
// timestep and text conditioning and a temporal mixing layer) and the VAE decoder (8× upsampling
// convolutions). Their shapes are those of a real latent-diffusion video pipeline scaled down; the
// weights are random from a seeded PRNG, so the bytes are the same on every run and the pictures
// they make are abstract. Replace any of them with a real export of the same inputs and outputs
// (see the README). Run from the repository root:
//
//   npx tsx examples/text-to-video/scripts/generate-models.ts
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  gaussian,
  initializer,
  int64s,
  model,
  mulberry32,
  node,
  OnnxType,
  tensorInfo,
} from "../../scripts/onnx-builder.js";

const MODELS = fileURLToPath(new URL("../models/", import.meta.url));

/** Tokens per prompt and the width of the text embedding. */
export const TOKENS = 32;
export const EMBED = 64;
/** 3 special tokens (PAD 0, BOS 1, EOS 2) and the 256 byte values. */
export const VOCAB = 259;
export const LATENT_CHANNELS = 4;
const HIDDEN = 64;

function weights(seed: number) {
  const random = mulberry32(seed);
  return {
    /** He-style initialisation: std = gain / sqrt(fanIn). */
    he: (name: string, dims: number[], fanIn: number, gain = Math.SQRT2) =>
      initializer(
        name,
        dims,
        gaussian(
          random,
          dims.reduce((a, d) => a * d, 1),
          gain / Math.sqrt(fanIn),
        ),
      ),
    constant: (name: string, dims: number[], value: number) =>
      initializer(name, dims, new Float32Array(dims.reduce((a, d) => a * d, 1)).fill(value)),
    values: (name: string, dims: number[], values: number[]) => initializer(name, dims, Float32Array.from(values)),
  };
}

function textEncoder(): Uint8Array {
  const w = weights(1);
  const initializers = [w.he("embedding", [VOCAB, EMBED], 1, 0.5), w.he("position", [TOKENS, EMBED], 1, 0.1)];
  const nodes = [node("Gather", ["embedding", "TOKENS"], ["embedded"]), node("Add", ["embedded", "position"], ["x0"])];
  initializers.push(w.values("attention_scale", [1], [1 / Math.sqrt(EMBED)]));
  let x = "x0";
  for (let layer = 0; layer < 2; layer++) {
    const p = (name: string) => `layer${layer}.${name}`;
    initializers.push(
      w.constant(p("ln1.gamma"), [EMBED], 1),
      w.constant(p("ln1.beta"), [EMBED], 0),
      w.he(p("wq"), [EMBED, EMBED], EMBED, 1),
      w.he(p("wk"), [EMBED, EMBED], EMBED, 1),
      w.he(p("wv"), [EMBED, EMBED], EMBED, 1),
      w.he(p("wo"), [EMBED, EMBED], EMBED, 1),
      w.constant(p("ln2.gamma"), [EMBED], 1),
      w.constant(p("ln2.beta"), [EMBED], 0),
      w.he(p("w1"), [EMBED, 2 * EMBED], EMBED),
      w.constant(p("b1"), [2 * EMBED], 0),
      w.he(p("w2"), [2 * EMBED, EMBED], 2 * EMBED, 1),
    );
    nodes.push(
      node("LayerNormalization", [x, p("ln1.gamma"), p("ln1.beta")], [p("h")], { axis: -1 }),
      node("MatMul", [p("h"), p("wq")], [p("q")]),
      node("MatMul", [p("h"), p("wk")], [p("k")]),
      node("MatMul", [p("h"), p("wv")], [p("v")]),
      node("Transpose", [p("k")], [p("kt")], { perm: [0, 2, 1] }),
      node("MatMul", [p("q"), p("kt")], [p("scores")]),
      node("Mul", [p("scores"), "attention_scale"], [p("scaled")]),
      node("Softmax", [p("scaled")], [p("attention")], { axis: -1 }),
      node("MatMul", [p("attention"), p("v")], [p("context")]),
      node("MatMul", [p("context"), p("wo")], [p("attended")]),
      node("Add", [x, p("attended")], [p("x1")]),
      node("LayerNormalization", [p("x1"), p("ln2.gamma"), p("ln2.beta")], [p("h2")], { axis: -1 }),
      node("MatMul", [p("h2"), p("w1")], [p("m0")]),
      node("Add", [p("m0"), p("b1")], [p("m1")]),
      node("Relu", [p("m1")], [p("m2")]),
      node("MatMul", [p("m2"), p("w2")], [p("m3")]),
      node("Add", [p("x1"), p("m3")], [p("x2")]),
    );
    x = p("x2");
  }
  initializers.push(w.constant("final.gamma", [EMBED], 1), w.constant("final.beta", [EMBED], 0));
  nodes.push(node("LayerNormalization", [x, "final.gamma", "final.beta"], ["EMBEDDING"], { axis: -1 }));
  return model({
    producer: "galley-text-to-video",
    name: "text_encoder",
    doc: "UNTRAINED 2-layer transformer text encoder: TOKENS [batch, 32] (byte tokens) -> EMBEDDING [batch, 32, 64]. Random weights (seed 1).",
    inputs: [tensorInfo("TOKENS", OnnxType.INT64, ["batch", TOKENS])],
    outputs: [tensorInfo("EMBEDDING", OnnxType.FLOAT, ["batch", TOKENS, EMBED])],
    nodes,
    initializers,
  });
}

const silu = (input: string, output: string) => [
  node("Sigmoid", [input], [`${output}.gate`]),
  node("Mul", [input, `${output}.gate`], [output]),
];

function denoiser(): Uint8Array {
  const w = weights(2);
  const conv = (name: string, out: number, inp: number) => [
    w.he(`${name}.weight`, [out, inp, 3, 3], inp * 9),
    w.constant(`${name}.bias`, [out], 0),
  ];
  const conv3 = (name: string, input: string, output: string) =>
    node("Conv", [input, `${name}.weight`, `${name}.bias`], [output], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] });
  const frequencies = Array.from({ length: EMBED / 2 }, (_, i) => Math.exp((-Math.log(10000) * i) / (EMBED / 2)));
  const initializers = [
    ...conv("conv_in", HIDDEN, LATENT_CHANNELS),
    ...conv("conv_mid", HIDDEN, HIDDEN),
    ...conv("conv_up", HIDDEN, HIDDEN),
    w.he("conv_out.weight", [LATENT_CHANNELS, HIDDEN, 3, 3], HIDDEN * 9, 0.3),
    w.constant("conv_out.bias", [LATENT_CHANNELS], 0),
    w.values("time.frequencies", [1, EMBED / 2], frequencies),
    w.he("cond.weight", [EMBED, HIDDEN], EMBED),
    w.constant("cond.bias", [HIDDEN], 0),
    w.values("half", [1], [0.5]),
    w.values("skip", [1], [0.8]),
    int64s("minus_one", [-1]),
    int64s("channels.latent", [LATENT_CHANNELS]),
    int64s("channels.hidden", [HIDDEN]),
    int64s("axes.cond", [1, 3, 4]),
    int64s("slice.0", [0]),
    int64s("slice.2", [2]),
    int64s("slice.3", [3]),
    int64s("slice.5", [5]),
  ];
  const nodes = [
    // [batch, frames, 4, h, w] -> [batch * frames, 4, h, w]
    node("Shape", ["LATENT"], ["shape"]),
    node("Slice", ["shape", "slice.3", "slice.5"], ["hw"]),
    node("Slice", ["shape", "slice.0", "slice.2"], ["batch_frames"]),
    node("Concat", ["minus_one", "channels.latent", "hw"], ["shape.flat"], { axis: 0 }),
    node("Concat", ["minus_one", "channels.hidden", "hw"], ["shape.flat_hidden"], { axis: 0 }),
    node("Concat", ["batch_frames", "channels.hidden", "hw"], ["shape.video_hidden"], { axis: 0 }),
    node("Reshape", ["LATENT", "shape.flat"], ["x"]),
    conv3("conv_in", "x", "h0"),
    ...silu("h0", "h1"),
    conv3("conv_mid", "h1", "h2"),
    // Conditioning: mean text embedding + sinusoidal timestep embedding -> one bias per channel.
    node("ReduceMean", ["TEXT_EMBEDDING"], ["text"], { axes: [1], keepdims: 0 }),
    node("Mul", ["TIMESTEP", "time.frequencies"], ["time.angles"]),
    node("Sin", ["time.angles"], ["time.sin"]),
    node("Cos", ["time.angles"], ["time.cos"]),
    node("Concat", ["time.sin", "time.cos"], ["time"], { axis: 1 }),
    node("Add", ["text", "time"], ["cond.in"]),
    node("MatMul", ["cond.in", "cond.weight"], ["cond.mm"]),
    node("Add", ["cond.mm", "cond.bias"], ["cond.pre"]),
    ...silu("cond.pre", "cond"),
    node("Unsqueeze", ["cond", "axes.cond"], ["cond.video"]),
    // Back to [batch, frames, 64, h, w]: add the conditioning, mix every frame with the mean frame.
    node("Reshape", ["h2", "shape.video_hidden"], ["v0"]),
    node("Add", ["v0", "cond.video"], ["v1"]),
    node("ReduceMean", ["v1"], ["v.mean"], { axes: [1], keepdims: 1 }),
    node("Add", ["v1", "v.mean"], ["v2.sum"]),
    node("Mul", ["v2.sum", "half"], ["v2"]),
    node("Reshape", ["v2", "shape.flat_hidden"], ["h3"]),
    ...silu("h3", "h4"),
    conv3("conv_up", "h4", "h5"),
    ...silu("h5", "h6"),
    conv3("conv_out", "h6", "eps.net"),
    node("Reshape", ["eps.net", "shape"], ["eps.video"]),
    node("Mul", ["LATENT", "skip"], ["eps.skip"]),
    node("Add", ["eps.skip", "eps.video"], ["NOISE_PRED"]),
  ];
  return model({
    producer: "galley-text-to-video",
    name: "denoiser",
    doc: "UNTRAINED latent video denoiser (noise prediction): LATENT [batch, frames, 4, h, w], TIMESTEP [batch, 1], TEXT_EMBEDDING [batch, 32, 64] -> NOISE_PRED like LATENT. Random weights (seed 2).",
    inputs: [
      tensorInfo("LATENT", OnnxType.FLOAT, ["batch", "frames", LATENT_CHANNELS, "height", "width"]),
      tensorInfo("TIMESTEP", OnnxType.FLOAT, ["batch", 1]),
      tensorInfo("TEXT_EMBEDDING", OnnxType.FLOAT, ["batch", TOKENS, EMBED]),
    ],
    outputs: [tensorInfo("NOISE_PRED", OnnxType.FLOAT, ["batch", "frames", LATENT_CHANNELS, "height", "width"])],
    nodes,
    initializers,
  });
}

function vaeDecoder(): Uint8Array {
  const w = weights(3);
  const widths = [LATENT_CHANNELS, 48, 48, 32];
  const initializers = [w.values("scales", [4], [1, 1, 2, 2])];
  const nodes = [];
  let x = "LATENT";
  for (let i = 0; i < 3; i++) {
    const inC = widths[i] ?? 0;
    const outC = widths[i + 1] ?? 0;
    initializers.push(w.he(`conv${i}.weight`, [outC, inC, 3, 3], inC * 9), w.he(`conv${i}.bias`, [outC], 1, 0.3));
    nodes.push(
      node("Conv", [x, `conv${i}.weight`, `conv${i}.bias`], [`c${i}`], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }),
      ...silu(`c${i}`, `a${i}`),
      node("Resize", [`a${i}`, "", "scales"], [`u${i}`], {
        mode: "linear",
        coordinate_transformation_mode: "half_pixel",
      }),
    );
    x = `u${i}`;
  }
  initializers.push(w.he("conv_out.weight", [3, 32, 3, 3], 32 * 9, 2), w.he("conv_out.bias", [3], 1, 0.5));
  nodes.push(
    node("Conv", [x, "conv_out.weight", "conv_out.bias"], ["rgb"], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }),
    node("Sigmoid", ["rgb"], ["IMAGE"]),
  );
  return model({
    producer: "galley-text-to-video",
    name: "vae_decoder",
    doc: "UNTRAINED VAE decoder: LATENT [frames, 4, h, w] -> IMAGE [frames, 3, 8h, 8w], RGB in [0, 1]. Random weights (seed 3).",
    inputs: [tensorInfo("LATENT", OnnxType.FLOAT, ["frames", LATENT_CHANNELS, "height", "width"])],
    outputs: [tensorInfo("IMAGE", OnnxType.FLOAT, ["frames", 3, "height_x8", "width_x8"])],
    nodes,
    initializers,
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const [name, bytes] of [
    ["text_encoder", textEncoder()],
    ["denoiser", denoiser()],
    ["vae_decoder", vaeDecoder()],
  ] as const) {
    mkdirSync(join(MODELS, name, "1"), { recursive: true });
    writeFileSync(join(MODELS, name, "1", "model.onnx"), bytes);
    process.stdout.write(`wrote models/${name}/1/model.onnx (${bytes.length} bytes)\n`);
  }
}

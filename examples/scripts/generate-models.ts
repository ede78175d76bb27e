// Generates the ONNX models of the example repository that `npm start` serves: Triton's example
// models simple, simple_int8 and simple_string, plus mlp_classifier (a small FP32 MLP), as ONNX
// files (opset 17, IR 8) with their config.pbtxt and, for mlp_classifier, labels.txt. The output is
// byte-for-byte deterministic (weights come from a seeded PRNG), so rerunning only rewrites the same bytes:
//
//   npx tsx examples/scripts/generate-models.ts      (from the repository root)
//
// Then check the models with `npx tsx examples/scripts/verify-models.ts`.
import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { AttributeProto_AttributeType, NodeProtoSchema } from "onnx-buf";
import { initializer, model, mulberry32, node, OnnxType, tensorInfo } from "./onnx-builder.js";

const REPOSITORY = fileURLToPath(new URL("../model_repository/", import.meta.url));

/** The symbolic first dimension of every model here, so that all of them can batch. */
const BATCH = "batch";

interface TensorConfig {
  name: string;
  dataType: string;
  dims: number[];
  labelFilename?: string;
}

interface ConfigSpec {
  comment: string[];
  name: string;
  maxBatchSize: number;
  inputs: TensorConfig[];
  outputs: TensorConfig[];
  /** Text after the outputs: scheduler, instance groups. */
  tail?: string;
}

function tensorList(field: "input" | "output", tensors: TensorConfig[]): string {
  const items = tensors.map((t) =>
    [
      "  {",
      `    name: "${t.name}"`,
      `    data_type: ${t.dataType}`,
      `    dims: [ ${t.dims.join(", ")} ]`,
      ...(t.labelFilename ? [`    label_filename: "${t.labelFilename}"`] : []),
      "  }",
    ].join("\n"),
  );
  return `${field} [\n${items.join(",\n")}\n]\n`;
}

/** A config.pbtxt in the layout of Triton's example repository. */
function configText(c: ConfigSpec): string {
  return [
    ...c.comment.map((line) => `# ${line}\n`),
    `name: "${c.name}"\n`,
    `platform: "onnxruntime_onnx"\n`,
    `max_batch_size: ${c.maxBatchSize}\n`,
    tensorList("input", c.inputs),
    tensorList("output", c.outputs),
    c.tail ?? "",
  ].join("");
}

interface ModelFiles {
  name: string;
  onnx: Uint8Array;
  config: string;
  /** Further files next to config.pbtxt. */
  extra?: Record<string, string>;
}

/**
 * simple and simple_int8: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 over [batch, 16].
 * INT8 inputs are widened to INT32 and the results cast back, which wraps modulo 256.
 */
function addSubModel(name: string, onnxType: OnnxType, tritonType: string): ModelFiles {
  const int8 = onnxType === OnnxType.INT8;
  const widen = int8
    ? [
        node("Cast", ["INPUT0"], ["input0_int32"], { to: OnnxType.INT32 }),
        node("Cast", ["INPUT1"], ["input1_int32"], { to: OnnxType.INT32 }),
      ]
    : [];
  const [a, b] = int8 ? ["input0_int32", "input1_int32"] : ["INPUT0", "INPUT1"];
  const [sum, diff] = int8 ? ["sum_int32", "diff_int32"] : ["OUTPUT0", "OUTPUT1"];
  const narrow = int8
    ? [
        node("Cast", [sum], ["OUTPUT0"], { to: OnnxType.INT8 }),
        node("Cast", [diff], ["OUTPUT1"], { to: OnnxType.INT8 }),
      ]
    : [];
  const io = (names: string[]) => names.map((n) => tensorInfo(n, onnxType, [BATCH, 16]));
  const configs = (names: string[]) => names.map((n) => ({ name: n, dataType: tritonType, dims: [16] }));
  return {
    name,
    onnx: model({
      name,
      doc: int8
        ? "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, computed in int32 and cast back to int8 (wraps)"
        : "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1",
      inputs: io(["INPUT0", "INPUT1"]),
      outputs: io(["OUTPUT0", "OUTPUT1"]),
      nodes: [...widen, node("Add", [a, b], [sum]), node("Sub", [a, b], [diff]), ...narrow],
    }),
    config: configText({
      comment: int8
        ? [
            "OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise over 16 int8 values;",
            "computed in int32 and cast back to int8, so results wrap (100 + 100 = -56).",
          ]
        : ["OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise over 16 int32 values."],
      name,
      maxBatchSize: 8,
      inputs: configs(["INPUT0", "INPUT1"]),
      outputs: configs(["OUTPUT0", "OUTPUT1"]),
    }),
  };
}

/** simple_string: the add/sub of `simple` on decimal strings, parsed to int32 and formatted back. */
function simpleString(): ModelFiles {
  const name = "simple_string";
  const io = (names: string[]) => names.map((n) => tensorInfo(n, OnnxType.STRING, [BATCH, 16]));
  const configs = (names: string[]) => names.map((n) => ({ name: n, dataType: "TYPE_STRING", dims: [16] }));
  return {
    name,
    onnx: model({
      name,
      doc: "Parses INPUT0 and INPUT1 as decimal int32; OUTPUT0 = their sum, OUTPUT1 = their difference, as decimal strings",
      inputs: io(["INPUT0", "INPUT1"]),
      outputs: io(["OUTPUT0", "OUTPUT1"]),
      nodes: [
        node("Cast", ["INPUT0"], ["input0_int32"], { to: OnnxType.INT32 }),
        node("Cast", ["INPUT1"], ["input1_int32"], { to: OnnxType.INT32 }),
        node("Add", ["input0_int32", "input1_int32"], ["sum_int32"]),
        node("Sub", ["input0_int32", "input1_int32"], ["diff_int32"]),
        node("Cast", ["sum_int32"], ["OUTPUT0"], { to: OnnxType.STRING }),
        node("Cast", ["diff_int32"], ["OUTPUT1"], { to: OnnxType.STRING }),
      ],
    }),
    config: configText({
      comment: [
        "Like simple, on 16 decimal strings: each input element is parsed as an int32, and OUTPUT0/OUTPUT1",
        'are the sum/difference formatted back as decimal strings ("15" - "3" = "12").',
      ],
      name,
      maxBatchSize: 8,
      inputs: configs(["INPUT0", "INPUT1"]),
      outputs: configs(["OUTPUT0", "OUTPUT1"]),
    }),
  };
}

const MLP_SEED = 20240917;
const MLP_LAYERS = [64, 256, 256, 10];
const DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"];

/**
 * mlp_classifier: PROBABILITIES = Softmax(Gemm(Relu(Gemm(Relu(Gemm(INPUT, W1, B1)), W2, B2)), W3, B3)).
 * Weights Wk are [fan_in, fan_out] and, like the biases, uniform in ±sqrt(3 / fan_in) (std 1/sqrt(fan_in)).
 */
function mlpClassifier(): ModelFiles {
  const name = "mlp_classifier";
  const random = mulberry32(MLP_SEED);
  const nodes = [];
  const initializers = [];
  let x = "INPUT";
  for (let layer = 1; layer < MLP_LAYERS.length; layer++) {
    const fanIn = MLP_LAYERS[layer - 1] ?? 0;
    const fanOut = MLP_LAYERS[layer] ?? 0;
    const limit = Math.sqrt(3 / fanIn);
    const uniform = (count: number) => Float32Array.from({ length: count }, () => (2 * random() - 1) * limit);
    initializers.push(initializer(`W${layer}`, [fanIn, fanOut], uniform(fanIn * fanOut)));
    initializers.push(initializer(`B${layer}`, [fanOut], uniform(fanOut)));
    const last = layer === MLP_LAYERS.length - 1;
    const gemm = last ? "logits" : `gemm${layer}`;
    nodes.push(node("Gemm", [x, `W${layer}`, `B${layer}`], [gemm]));
    if (!last) {
      x = `relu${layer}`;
      nodes.push(node("Relu", [gemm], [x]));
    }
  }
  nodes.push(node("Softmax", ["logits"], ["PROBABILITIES"], { axis: -1 }));
  return {
    name,
    onnx: model({
      name,
      doc: "PROBABILITIES = Softmax(Gemm(Relu(Gemm(Relu(Gemm(INPUT, W1, B1)), W2, B2)), W3, B3)), 64 -> 256 -> 256 -> 10",
      inputs: [tensorInfo("INPUT", OnnxType.FLOAT, [BATCH, 64])],
      outputs: [tensorInfo("PROBABILITIES", OnnxType.FLOAT, [BATCH, 10])],
      nodes,
      initializers,
    }),
    config: configText({
      comment: [
        "A 64 -> 256 -> 256 -> 10 multi-layer perceptron (ReLU, then softmax) with fixed pseudo-random weights:",
        "class probabilities for 10 classes named in labels.txt. No real meaning; it exists to give the server work.",
      ],
      name,
      maxBatchSize: 64,
      inputs: [{ name: "INPUT", dataType: "TYPE_FP32", dims: [64] }],
      outputs: [{ name: "PROBABILITIES", dataType: "TYPE_FP32", dims: [10], labelFilename: "labels.txt" }],
      tail: [
        "dynamic_batching {",
        "  max_queue_delay_microseconds: 100",
        "}",
        "instance_group [",
        "  {",
        "    count: 1",
        "    kind: KIND_CPU",
        "  }",
        "]",
        "",
      ].join("\n"),
    }),
    extra: { "labels.txt": `${DIGITS.join("\n")}\n` },
  };
}

/**
 * simple_sequence and simple_dyna_sequence (Triton's stateless sequence examples, PROTOCOL.md
 * §11.1): the sequence batcher feeds the control inputs, the model only computes
 * OUTPUT = (INPUT + START) × READY, and the dyna variant OUTPUT = (INPUT + START + END × int32(CORRID)) × READY.
 */
function sequenceModel(dyna: boolean): ModelFiles {
  const name = dyna ? "simple_dyna_sequence" : "simple_sequence";
  const int32 = (n: string) => tensorInfo(n, OnnxType.INT32, [BATCH, 1]);
  const controls = dyna ? ["START", "END", "READY"] : ["START", "READY"];
  const nodes = dyna
    ? [
        node("Cast", ["CORRID"], ["corrid_int32"], { to: OnnxType.INT32 }),
        node("Mul", ["END", "corrid_int32"], ["end_corrid"]),
        node("Add", ["INPUT", "START"], ["input_start"]),
        node("Add", ["input_start", "end_corrid"], ["sum"]),
        node("Mul", ["sum", "READY"], ["OUTPUT"]),
      ]
    : [node("Add", ["INPUT", "START"], ["sum"]), node("Mul", ["sum", "READY"], ["OUTPUT"])];
  const control = (n: string, kind: string) =>
    `  {\n    name: "${n}"\n    control [\n      {\n        kind: ${kind}\n        int32_false_true: [ 0, 1 ]\n      }\n    ]\n  }`;
  const controlInputs = [
    control("START", "CONTROL_SEQUENCE_START"),
    ...(dyna ? [control("END", "CONTROL_SEQUENCE_END")] : []),
    control("READY", "CONTROL_SEQUENCE_READY"),
    ...(dyna
      ? [
          '  {\n    name: "CORRID"\n    control [\n      {\n        kind: CONTROL_SEQUENCE_CORRID\n        data_type: TYPE_UINT64\n      }\n    ]\n  }',
        ]
      : []),
  ];
  const strategy = dyna
    ? "  max_sequence_idle_microseconds: 10000000\n  oldest {\n    max_candidate_sequences: 1024\n    max_queue_delay_microseconds: 10000\n  }\n"
    : "";
  return {
    name,
    onnx: model({
      name,
      doc: dyna ? "OUTPUT = (INPUT + START + END * int32(CORRID)) * READY" : "OUTPUT = (INPUT + START) * READY",
      inputs: [
        int32("INPUT"),
        ...controls.map(int32),
        ...(dyna ? [tensorInfo("CORRID", OnnxType.UINT64, [BATCH, 1])] : []),
      ],
      outputs: [int32("OUTPUT")],
      nodes,
    }),
    config: configText({
      comment: dyna
        ? [
            "OUTPUT = (INPUT + START + END * int32(CORRID)) * READY; the sequence batcher (oldest strategy)",
            "fills the START, END, READY and CORRID (uint64 correlation id) control inputs.",
          ]
        : ["OUTPUT = (INPUT + START) * READY; the sequence batcher fills the START and READY control inputs."],
      name,
      maxBatchSize: 8,
      inputs: [{ name: "INPUT", dataType: "TYPE_INT32", dims: [1] }],
      outputs: [{ name: "OUTPUT", dataType: "TYPE_INT32", dims: [1] }],
      tail: `sequence_batching {\n${strategy}  control_input [\n${controlInputs.join(",\n")}\n  ]\n}\ninstance_group [\n  {\n    count: ${dyna ? 2 : 1}\n    kind: KIND_CPU\n  }\n]\n`,
    }),
  };
}

/**
 * A preprocess → model → postprocess pipeline around mlp_classifier: `preprocess` scales UINT8
 * pixels to FP32 in [-0.5, 0.5], `postprocess` picks the class and its probability, and the
 * `classifier_pipeline` ensemble chains the three.
 */
function pipelineModels(): ModelFiles[] {
  const preprocess: ModelFiles = {
    name: "preprocess",
    onnx: model({
      name: "preprocess",
      doc: "OUTPUT = float(IMAGE) / 255 - 0.5",
      inputs: [tensorInfo("IMAGE", OnnxType.UINT8, [BATCH, 64])],
      outputs: [tensorInfo("OUTPUT", OnnxType.FLOAT, [BATCH, 64])],
      initializers: [initializer("scale", [], Float32Array.of(255)), initializer("offset", [], Float32Array.of(0.5))],
      nodes: [
        node("Cast", ["IMAGE"], ["pixels"], { to: OnnxType.FLOAT }),
        node("Div", ["pixels", "scale"], ["unit"]),
        node("Sub", ["unit", "offset"], ["OUTPUT"]),
      ],
    }),
    config: configText({
      comment: ["Pipeline step 1: OUTPUT = float(IMAGE) / 255 - 0.5, from 64 uint8 pixels."],
      name: "preprocess",
      maxBatchSize: 64,
      inputs: [{ name: "IMAGE", dataType: "TYPE_UINT8", dims: [64] }],
      outputs: [{ name: "OUTPUT", dataType: "TYPE_FP32", dims: [64] }],
    }),
  };
  const reduceMax = create(NodeProtoSchema, {
    name: "ReduceMax_SCORE",
    opType: "ReduceMax",
    input: ["PROBABILITIES"],
    output: ["SCORE"],
    attribute: [
      { name: "axes", type: AttributeProto_AttributeType.INTS, ints: [1n] },
      { name: "keepdims", type: AttributeProto_AttributeType.INT, i: 1n },
    ],
  });
  const postprocess: ModelFiles = {
    name: "postprocess",
    onnx: model({
      name: "postprocess",
      doc: "CLASS = argmax(PROBABILITIES), SCORE = max(PROBABILITIES)",
      inputs: [tensorInfo("PROBABILITIES", OnnxType.FLOAT, [BATCH, 10])],
      outputs: [tensorInfo("CLASS", OnnxType.INT64, [BATCH, 1]), tensorInfo("SCORE", OnnxType.FLOAT, [BATCH, 1])],
      nodes: [node("ArgMax", ["PROBABILITIES"], ["CLASS"], { axis: 1, keepdims: 1 }), reduceMax],
    }),
    config: configText({
      comment: ["Pipeline step 3: CLASS = argmax(PROBABILITIES) and SCORE = its probability."],
      name: "postprocess",
      maxBatchSize: 64,
      inputs: [{ name: "PROBABILITIES", dataType: "TYPE_FP32", dims: [10] }],
      outputs: [
        { name: "CLASS", dataType: "TYPE_INT64", dims: [1] },
        { name: "SCORE", dataType: "TYPE_FP32", dims: [1] },
      ],
    }),
  };
  return [preprocess, postprocess];
}

const PIPELINE_CONFIG = `# preprocess -> mlp_classifier -> postprocess: 64 uint8 pixels in, the class and its probability out.
name: "classifier_pipeline"
platform: "ensemble"
max_batch_size: 64
input [
  {
    name: "IMAGE"
    data_type: TYPE_UINT8
    dims: [ 64 ]
  }
]
output [
  {
    name: "CLASS"
    data_type: TYPE_INT64
    dims: [ 1 ]
  },
  {
    name: "SCORE"
    data_type: TYPE_FP32
    dims: [ 1 ]
  }
]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "IMAGE" value: "IMAGE" }
      output_map { key: "OUTPUT" value: "features" }
    },
    {
      model_name: "mlp_classifier"
      model_version: -1
      input_map { key: "INPUT" value: "features" }
      output_map { key: "PROBABILITIES" value: "probabilities" }
    },
    {
      model_name: "postprocess"
      model_version: -1
      input_map { key: "PROBABILITIES" value: "probabilities" }
      output_map { key: "CLASS" value: "CLASS" }
      output_map { key: "SCORE" value: "SCORE" }
    }
  ]
}
`;

function write(path: string, data: Uint8Array | string): void {
  writeFileSync(path, data);
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  const sha = createHash("sha256").update(bytes).digest("hex");
  console.log(`${sha}  ${String(bytes.length).padStart(7)}  ${relative(process.cwd(), path)}`);
}

const models = [
  addSubModel("simple", OnnxType.INT32, "TYPE_INT32"),
  addSubModel("simple_int8", OnnxType.INT8, "TYPE_INT8"),
  simpleString(),
  mlpClassifier(),
  sequenceModel(false),
  sequenceModel(true),
  ...pipelineModels(),
];
for (const m of models) {
  const folder = join(REPOSITORY, m.name);
  mkdirSync(join(folder, "1"), { recursive: true });
  write(join(folder, "config.pbtxt"), m.config);
  for (const [file, text] of Object.entries(m.extra ?? {})) write(join(folder, file), text);
  write(join(folder, "1", "model.onnx"), m.onnx);
}
// The ensemble has a config and an empty version folder (Triton requires one).
mkdirSync(join(REPOSITORY, "classifier_pipeline", "1"), { recursive: true });
write(join(REPOSITORY, "classifier_pipeline", "1", ".gitkeep"), "");
write(join(REPOSITORY, "classifier_pipeline", "config.pbtxt"), PIPELINE_CONFIG);

// The compute-bound model of the batching benchmark: FP32 INPUT [batch, 1024] → Gemm 1024→4096 → Relu →
// Gemm 4096→1024 → OUTPUT, with seeded pseudo-random weights. It is generated at run time into a
// temporary model repository (never committed) next to copies of `simple` and `ensemble_add_sub`.
import { cp, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { initializer, model, mulberry32, node, OnnxType, tensorInfo } from "../../examples/scripts/onnx-builder.js";
import { REPOSITORY } from "./simple.js";

export const MLP_IN = 1024;
export const MLP_HIDDEN = 4096;
export const MLP_OUT = 1024;
export const MAX_BATCH = 32;
export const MAX_QUEUE_DELAY_US = 500;
/** `intra_op_thread_count` of both MLP configs (and of the in-process baseline), unless overridden. */
export const INTRA_OP_THREADS = 2;
/** With `dynamic_batching`. */
export const BATCHED = "mlp_batched";
/** The default scheduler: one request per execution. */
export const UNBATCHED = "mlp_unbatched";

/** Uniform in ±sqrt(3 / fanIn), so activations keep a unit-ish scale through both layers. */
function weights(random: () => number, count: number, fanIn: number): Float32Array {
  const limit = Math.sqrt(3 / fanIn);
  const values = new Float32Array(count);
  for (let i = 0; i < count; i++) values[i] = (2 * random() - 1) * limit;
  return values;
}

/** The ONNX bytes: OUTPUT = Gemm(Relu(Gemm(INPUT, W1, B1)), W2, B2), W1 [1024,4096], W2 [4096,1024]. */
export function mlpOnnx(seed = 20261202): Uint8Array {
  const random = mulberry32(seed);
  return model({
    name: "mlp",
    doc: "OUTPUT = Gemm(Relu(Gemm(INPUT, W1, B1)), W2, B2), 1024 -> 4096 -> 1024, seeded weights (benchmark only)",
    inputs: [tensorInfo("INPUT", OnnxType.FLOAT, ["batch", MLP_IN])],
    outputs: [tensorInfo("OUTPUT", OnnxType.FLOAT, ["batch", MLP_OUT])],
    nodes: [
      node("Gemm", ["INPUT", "W1", "B1"], ["hidden"]),
      node("Relu", ["hidden"], ["relu"]),
      node("Gemm", ["relu", "W2", "B2"], ["OUTPUT"]),
    ],
    initializers: [
      initializer("W1", [MLP_IN, MLP_HIDDEN], weights(random, MLP_IN * MLP_HIDDEN, MLP_IN)),
      initializer("B1", [MLP_HIDDEN], weights(random, MLP_HIDDEN, MLP_IN)),
      initializer("W2", [MLP_HIDDEN, MLP_OUT], weights(random, MLP_HIDDEN * MLP_OUT, MLP_HIDDEN)),
      initializer("B2", [MLP_OUT], weights(random, MLP_OUT, MLP_HIDDEN)),
    ],
  });
}

function configText(name: string, batching: boolean, intraOp: number, parameters: Record<string, string>): string {
  const more = Object.entries(parameters)
    .map(([key, value]) => `parameters { key: "${key}" value { string_value: "${value}" } }\n`)
    .join("");
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: ${MAX_BATCH}
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ ${MLP_IN} ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ ${MLP_OUT} ] } ]
${batching ? `dynamic_batching { preferred_batch_size: [ 8, 16, 32 ] max_queue_delay_microseconds: ${MAX_QUEUE_DELAY_US} }\n` : ""}instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "intra_op_thread_count" value { string_value: "${intraOp}" } }
${more}`;
}

/** A temporary model repository: both MLP folders, `simple` and `ensemble_add_sub`. */
export interface MlpRepository {
  dir: string;
  /** The MLP's ONNX file, for the in-process baseline. */
  modelFile: string;
  remove(): Promise<void>;
}

/** `parameters`: more config parameters for both MLP models (`worker_hot_wait_us`, say). */
export async function writeRepository(
  intraOp = INTRA_OP_THREADS,
  parameters: Record<string, string> = {},
): Promise<MlpRepository> {
  const dir = await mkdtemp(join(tmpdir(), "galley-bench-"));
  const onnx = mlpOnnx();
  for (const [name, batching] of [
    [BATCHED, true],
    [UNBATCHED, false],
  ] as const) {
    await mkdir(join(dir, name, "1"), { recursive: true });
    await writeFile(join(dir, name, "1", "model.onnx"), onnx);
    await writeFile(join(dir, name, "config.pbtxt"), configText(name, batching, intraOp, parameters));
  }
  for (const name of ["simple", "ensemble_add_sub"]) {
    await cp(join(REPOSITORY, name), join(dir, name), { recursive: true });
  }
  return {
    dir,
    modelFile: join(dir, UNBATCHED, "1", "model.onnx"),
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

/** A deterministic input of `batch` rows (values in [-1, 1)), the same bytes for every target. */
export function mlpInput(batch: number): Float32Array {
  const random = mulberry32(7 + batch);
  return Float32Array.from({ length: batch * MLP_IN }, () => 2 * random() - 1);
}

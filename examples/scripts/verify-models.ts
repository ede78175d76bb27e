// Checks the example model repository written by generate-models.ts. For each model it parses config.pbtxt
// with @galley/config, checks that the config's inputs and outputs (names, datatypes, dims) match the ONNX
// graph's, then runs the model with onnxruntime-node on batches of 1 and 3 and compares every output with
// values computed here: exactly for the integer and string models, within 1e-5 relative for mlp_classifier
// (whose rows must also sum to 1). Exits 1 on any mismatch. From the repository root (onnxruntime-node,
// onnx-buf and @galley/config resolve from the root node_modules; @galley/config needs its dist built,
// `npx nx run @galley/config:build`):
//
//   npx tsx examples/scripts/verify-models.ts
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { parseModelConfig, readOnnxModelIO } from "@galley/config";
import { DataType } from "@galley/proto";
import { ModelProtoSchema, TensorProto_DataType } from "onnx-buf";
import ort from "onnxruntime-node";

const REPOSITORY = fileURLToPath(new URL("../model_repository/", import.meta.url));
const BATCH_SIZES = [1, 3];
const failures: string[] = [];

function check(ok: boolean, what: string): void {
  if (!ok) failures.push(what);
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
}

const modelPath = (name: string) => join(REPOSITORY, name, "1", "model.onnx");

/** The config's inputs and outputs must be the ONNX graph's, with the batch dimension dropped. */
function checkConfig(name: string): void {
  const config = parseModelConfig(readFileSync(join(REPOSITORY, name, "config.pbtxt"), "utf8"), name);
  const io = readOnnxModelIO(readFileSync(modelPath(name)));
  check(config.name === name && config.platform === "onnxruntime_onnx", `${name}: config names the model and ONNX`);
  const describe = (t: { name: string; dataType: DataType; dims: bigint[] }) =>
    `${t.name} ${DataType[t.dataType]} [${t.dims.join(",")}]`;
  const batch = config.maxBatchSize > 0 ? [-1n] : [];
  for (const [kind, fromConfig, fromOnnx] of [
    ["inputs", config.input, io.inputs],
    ["outputs", config.output, io.outputs],
  ] as const) {
    const expected = fromConfig.map((t) => describe({ ...t, dims: [...batch, ...t.dims] })).sort();
    const actual = fromOnnx.map(describe).sort();
    check(
      JSON.stringify(expected) === JSON.stringify(actual),
      `${name}: config ${kind} match the ONNX graph (${actual.join("; ")})`,
    );
  }
  for (const output of config.output.filter((o) => o.labelFilename)) {
    const labels = readFileSync(join(REPOSITORY, name, output.labelFilename), "utf8")
      .trimEnd()
      .split("\n");
    const classes = output.dims.reduce((a, d) => a * Number(d), 1);
    check(
      labels.length === classes,
      `${name}: ${output.labelFilename} has ${labels.length} labels for ${classes} classes`,
    );
  }
}

type Feeds = Record<string, ort.Tensor>;
type Expected = Record<string, ArrayLike<number | string>>;

async function run(name: string, feeds: Feeds): Promise<ort.InferenceSession.ReturnType> {
  const session = await ort.InferenceSession.create(modelPath(name));
  try {
    return await session.run(feeds);
  } finally {
    await session.release();
  }
}

/** Runs the model and requires every output element to equal the expected one. */
async function checkExact(name: string, batch: number, feeds: Feeds, expected: Expected): Promise<void> {
  const results = await run(name, feeds);
  for (const [output, want] of Object.entries(expected)) {
    const got = results[output];
    const wrong = got ? Array.from(want).findIndex((w, i) => got.data[i] !== w) : 0;
    const sameLength = got !== undefined && got.data.length === want.length;
    check(
      sameLength && wrong === -1,
      `${name} batch ${batch}: ${output} exact` +
        (sameLength && wrong !== -1 ? ` (element ${wrong}: got ${got?.data[wrong]}, want ${want[wrong]})` : ""),
    );
  }
}

const wrapInt32 = (x: number) => x | 0;
const wrapInt8 = (x: number) => (x << 24) >> 24;

/** Deterministic pseudo-random integers in [min, max] for row r, column c. */
const spread = (r: number, c: number, salt: number, min: number, max: number) =>
  min + ((c * 7919 + r * 104729 + salt * 1299709) % (max - min + 1));

async function verifySimple(batch: number): Promise<void> {
  const a = Int32Array.from({ length: batch * 16 }, (_, i) => spread(Math.floor(i / 16), i % 16, 1, -1000, 1000));
  const b = Int32Array.from({ length: batch * 16 }, (_, i) => spread(Math.floor(i / 16), i % 16, 2, -1000, 1000));
  // int32 overflow wraps, as in ONNX Runtime's Add and Sub.
  a.set([2147483647, -2147483648]);
  b.set([1, 1]);
  await checkExact(
    "simple",
    batch,
    { INPUT0: new ort.Tensor("int32", a, [batch, 16]), INPUT1: new ort.Tensor("int32", b, [batch, 16]) },
    { OUTPUT0: a.map((x, i) => wrapInt32(x + (b[i] ?? 0))), OUTPUT1: a.map((x, i) => wrapInt32(x - (b[i] ?? 0))) },
  );
}

async function verifySimpleInt8(batch: number): Promise<void> {
  const a = Int8Array.from({ length: batch * 16 }, (_, i) => spread(Math.floor(i / 16), i % 16, 3, -128, 127));
  const b = Int8Array.from({ length: batch * 16 }, (_, i) => spread(Math.floor(i / 16), i % 16, 4, -128, 127));
  a.set([100, -128, 127, -100]);
  b.set([100, 127, -1, 100]);
  const sum = Array.from(a, (x, i) => wrapInt8(x + (b[i] ?? 0)));
  const diff = Array.from(a, (x, i) => wrapInt8(x - (b[i] ?? 0)));
  await checkExact(
    "simple_int8",
    batch,
    { INPUT0: new ort.Tensor("int8", a, [batch, 16]), INPUT1: new ort.Tensor("int8", b, [batch, 16]) },
    { OUTPUT0: sum, OUTPUT1: diff },
  );
  if (batch === 1) {
    console.log(`     int8 wrap: 100+100=${sum[0]}, -128-127=${diff[1]}, 127-(-1)=${diff[2]}, -100-100=${diff[3]}`);
  }
}

async function verifySimpleString(batch: number): Promise<void> {
  const a = Array.from({ length: batch * 16 }, (_, i) => spread(Math.floor(i / 16), i % 16, 5, -100000, 100000));
  const b = Array.from({ length: batch * 16 }, (_, i) => spread(Math.floor(i / 16), i % 16, 6, -100000, 100000));
  a.splice(0, 3, 1, 15, 2147483647);
  b.splice(0, 3, -1, 3, 1);
  await checkExact(
    "simple_string",
    batch,
    {
      INPUT0: new ort.Tensor("string", a.map(String), [batch, 16]),
      INPUT1: new ort.Tensor("string", b.map(String), [batch, 16]),
    },
    {
      OUTPUT0: a.map((x, i) => String(wrapInt32(x + (b[i] ?? 0)))),
      OUTPUT1: a.map((x, i) => String(wrapInt32(x - (b[i] ?? 0)))),
    },
  );
}

/** The stored float32 initializers of a model, by name. */
function floatInitializers(name: string): Map<string, Float32Array> {
  const graph = fromBinary(ModelProtoSchema, readFileSync(modelPath(name))).graph;
  const weights = new Map<string, Float32Array>();
  for (const t of graph?.initializer ?? []) {
    if (t.dataType !== TensorProto_DataType.FLOAT) throw new Error(`${t.name} is not FLOAT`);
    const view = new DataView(t.rawData.buffer, t.rawData.byteOffset, t.rawData.byteLength);
    weights.set(
      t.name,
      Float32Array.from({ length: t.rawData.byteLength / 4 }, (_, i) => view.getFloat32(i * 4, true)),
    );
  }
  return weights;
}

/** The MLP in float64: Softmax(Gemm(Relu(Gemm(Relu(Gemm(x, W1, B1)), W2, B2)), W3, B3)) for one row. */
function mlpReference(weights: Map<string, Float32Array>, row: Float32Array): number[] {
  let x: number[] = Array.from(row);
  for (let layer = 1; weights.has(`W${layer}`); layer++) {
    const w = weights.get(`W${layer}`) ?? new Float32Array();
    const bias = weights.get(`B${layer}`) ?? new Float32Array();
    const y = Array.from(bias, Number);
    x.forEach((xi, i) => {
      for (let j = 0; j < y.length; j++) y[j] = (y[j] ?? 0) + xi * (w[i * y.length + j] ?? 0);
    });
    x = weights.has(`W${layer + 1}`) ? y.map((v) => Math.max(0, v)) : y;
  }
  const max = Math.max(...x);
  const exps = x.map((v) => Math.exp(v - max));
  const total = exps.reduce((a, v) => a + v, 0);
  return exps.map((v) => v / total);
}

async function verifyMlp(batch: number, labels: string[]): Promise<void> {
  const weights = floatInitializers("mlp_classifier");
  const input = Float32Array.from({ length: batch * 64 }, (_, i) => Math.sin(i * 0.37 + 1) * 2);
  const results = await run("mlp_classifier", { INPUT: new ort.Tensor("float32", input, [batch, 64]) });
  const got = results.PROBABILITIES;
  check(got?.dims.join(",") === `${batch},10`, `mlp_classifier batch ${batch}: PROBABILITIES shape [${got?.dims}]`);
  const data = (got?.data ?? new Float32Array()) as Float32Array;
  let worst = 0;
  let worstSum = 0;
  const top: string[] = [];
  for (let r = 0; r < batch; r++) {
    const want = mlpReference(weights, input.subarray(r * 64, (r + 1) * 64));
    const row = Array.from(data.subarray(r * 10, (r + 1) * 10));
    want.forEach((w, j) => {
      worst = Math.max(worst, Math.abs((row[j] ?? Number.NaN) - w) / Math.abs(w));
    });
    worstSum = Math.max(worstSum, Math.abs(row.reduce((a, v) => a + v, 0) - 1));
    const best = row.indexOf(Math.max(...row));
    top.push(`${labels[best]} ${(row[best] ?? 0).toFixed(3)}`);
  }
  check(worst <= 1e-5, `mlp_classifier batch ${batch}: within 1e-5 relative (worst ${worst.toExponential(2)})`);
  check(worstSum <= 1e-5, `mlp_classifier batch ${batch}: rows sum to 1 (worst |sum-1| ${worstSum.toExponential(2)})`);
  console.log(`     top class per row: ${top.join(", ")}`);
}

for (const name of ["simple", "simple_int8", "simple_string", "mlp_classifier"]) checkConfig(name);
const labels = readFileSync(join(REPOSITORY, "mlp_classifier", "labels.txt"), "utf8")
  .trimEnd()
  .split("\n");
for (const batch of BATCH_SIZES) {
  await verifySimple(batch);
  await verifySimpleInt8(batch);
  await verifySimpleString(batch);
  await verifyMlp(batch, labels);
}

console.log(failures.length === 0 ? "\nall checks passed" : `\n${failures.length} check(s) failed`);
process.exitCode = failures.length === 0 ? 0 : 1;

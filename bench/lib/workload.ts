// What a benchmark request carries, per model: the inputs every client sends (the same values to
// every server) and the outputs it expects back. `simple` is the default; `identity_fp32` is the
// tensor-bound scenario of throughput.ts. A spec crosses the IPC channel; each process builds the
// workload from it (deterministically, so every process has the same bytes).
import { IDENTITY, identityInput, identityModelFile } from "./identity.js";
import { EXPECTED_DIFFERENCE, EXPECTED_SUM, INPUT0, INPUT1, MODEL, MODEL_FILE, REPOSITORY, SHAPE } from "./simple.js";

/** Which model a target runs; absent means `simple`. */
export type ModelSpec = { model: "simple" } | { model: "identity"; elements: number; repository: string };

export type Datatype = "INT32" | "FP32";
export type Values = Int32Array | Float32Array;

export interface TensorValues {
  name: string;
  datatype: Datatype;
  shape: number[];
  values: Values;
}

export interface Workload {
  model: string;
  /** `/v2/models/<model>/infer`. */
  path: string;
  /** The repository holding the model, and its ONNX file (for the in-process baselines). */
  repository: string;
  modelFile: string;
  inputs: TensorValues[];
  /** The outputs every caller returns, in this order, their shape and what they must hold. */
  outputs: { name: string; datatype: Datatype; shape: number[]; expected: Values }[];
}

const cache = new Map<string, Workload>();

export function workloadOf(spec: ModelSpec = { model: "simple" }): Workload {
  const key = JSON.stringify(spec);
  let workload = cache.get(key);
  if (!workload) {
    workload = build(spec);
    cache.set(key, workload);
  }
  return workload;
}

function build(spec: ModelSpec): Workload {
  if (spec.model === "simple") {
    return {
      model: MODEL,
      path: `/v2/models/${MODEL}/infer`,
      repository: REPOSITORY,
      modelFile: MODEL_FILE,
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: SHAPE, values: INPUT0 },
        { name: "INPUT1", datatype: "INT32", shape: SHAPE, values: INPUT1 },
      ],
      outputs: [
        { name: "OUTPUT0", datatype: "INT32", shape: SHAPE, expected: EXPECTED_SUM },
        { name: "OUTPUT1", datatype: "INT32", shape: SHAPE, expected: EXPECTED_DIFFERENCE },
      ],
    };
  }
  const values = identityInput(spec.elements);
  return {
    model: IDENTITY,
    path: `/v2/models/${IDENTITY}/infer`,
    repository: spec.repository,
    modelFile: identityModelFile(spec.repository),
    inputs: [{ name: "INPUT0", datatype: "FP32", shape: [spec.elements], values }],
    outputs: [{ name: "OUTPUT0", datatype: "FP32", shape: [spec.elements], expected: values }],
  };
}

/** The bytes of a tensor's values (a copy with a buffer of its own). */
export function bytesOf(values: Values): Uint8Array {
  return new Uint8Array(values.buffer.slice(values.byteOffset, values.byteOffset + values.byteLength));
}

/** Little-endian bytes as values of `datatype`, copied (the view may be unaligned, or a Buffer's pool). */
export function valuesOf(datatype: Datatype, bytes: Uint8Array): Values {
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return datatype === "FP32" ? new Float32Array(copy.buffer) : new Int32Array(copy.buffer);
}

/** A KServe v2 JSON request (PROTOCOL.md §1.3): `data` a flat array of numbers. */
export function jsonBody(workload: Workload): Buffer {
  const inputs = workload.inputs.map(({ name, shape, datatype, values }) => ({
    name,
    shape,
    datatype,
    data: [...values],
  }));
  return Buffer.from(JSON.stringify({ inputs }));
}

/** A binary-tensor request (PROTOCOL.md §1.5): JSON header, then the input blobs; every output binary. */
export function binaryBody(workload: Workload): { body: Buffer; headerLength: number } {
  const header = Buffer.from(
    JSON.stringify({
      inputs: workload.inputs.map(({ name, shape, datatype, values }) => ({
        name,
        shape,
        datatype,
        parameters: { binary_data_size: values.byteLength },
      })),
      outputs: workload.outputs.map(({ name }) => ({ name, parameters: { binary_data: true } })),
    }),
  );
  const blobs = workload.inputs.map(({ values }) => bytesOf(values));
  return { body: Buffer.concat([header, ...blobs]), headerLength: header.byteLength };
}

/** A check of one call's outputs against the workload's expected values. */
export interface OutputCheck {
  /** Each output's length, as received. */
  lengths: number[];
  sizesOk: boolean;
  valuesOk: boolean;
  /** The first values of each output, for an error message. */
  shown: string;
}

/**
 * Compare outputs with the expected values, element by element in the expected datatype (a JSON
 * number is rounded to FP32 first, so any exact decimal form of the float passes).
 */
export function checkOutputs(workload: Workload, outputs: readonly ArrayLike<number>[]): OutputCheck {
  const lengths = outputs.map((o) => o.length);
  const sizesOk =
    outputs.length === workload.outputs.length && workload.outputs.every((o, i) => o.expected.length === lengths[i]);
  const valuesOk =
    sizesOk &&
    workload.outputs.every(({ datatype, expected }, i) => {
      const got = outputs[i] as ArrayLike<number>;
      const typed = datatype === "FP32" ? Float32Array.from(got) : Int32Array.from(got);
      return typed.every((v, j) => v === expected[j]);
    });
  const shown = JSON.stringify(outputs.map((o) => Array.from(o).slice(0, 8)));
  return { lengths, sizesOk, valuesOk, shown };
}

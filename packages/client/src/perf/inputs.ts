// The tensors `galley perf` sends: shaped from the model's metadata and config, filled with random
// values, zeros, or the entries of a perf_analyzer JSON data file.
import { elementType, type ModelConfig } from "@galley/proto";
import type { ModelMetadata } from "../client-types.js";
import {
  type DataType,
  elementCount,
  encodeBytes,
  type InputTensor,
  toBfloat16Bits,
  toFloat16Bits,
} from "../tensor.js";
import type { InputDataSource } from "./options.js";

/** A mistake in the model's shapes or in the input data: printed, exit code 1. */
export class PerfInputError extends Error {
  override name = "PerfInputError";
}

/** One input as the model declares it, without the batch dimension (`-1`: variable). */
export interface InputSpec {
  name: string;
  datatype: DataType;
  dims: number[];
}

/** One output, and the bytes a response holds for it when its shape tells (else undefined). */
export interface OutputSpec {
  name: string;
  datatype: DataType;
  byteSize: number | undefined;
}

/** What a request to the model looks like. */
export interface ModelShape {
  /** The model batches (`max_batch_size` > 0): shapes get a leading batch dimension. */
  batched: boolean;
  inputs: InputSpec[];
  outputs: OutputSpec[];
}

/** The tensors of one request; the load cycles through a list of these. */
export type InputSet = Record<string, InputTensor>;

/** perf_analyzer's input data file: `{"data": [{"INPUT0": [...], ...}, ...]}`. */
interface DataFile {
  data: Record<string, unknown>[];
}

/**
 * The inputs and outputs of a request at `batchSize`, from the model's metadata (datatypes, shapes)
 * and config (`max_batch_size`), with `--shape` filling variable dimensions.
 */
export function modelShape(
  metadata: ModelMetadata,
  config: ModelConfig,
  batchSize: number,
  shapes: Record<string, number[]>,
): ModelShape {
  const batched = config.maxBatchSize > 0;
  if (!batched && batchSize > 1) {
    throw new PerfInputError(
      `can not use batch size ${batchSize}: '${metadata.name}' does not batch (max_batch_size 0)`,
    );
  }
  if (batched && batchSize > config.maxBatchSize) {
    throw new PerfInputError(
      `batch size ${batchSize} is larger than '${metadata.name}''s max_batch_size ${config.maxBatchSize}`,
    );
  }
  const unbatched = (shape: number[]) => (batched ? shape.slice(1) : shape);
  for (const name of Object.keys(shapes)) {
    if (!metadata.inputs.some((i) => i.name === name)) {
      throw new PerfInputError(`--shape names '${name}', which is not an input of '${metadata.name}'`);
    }
  }
  const inputs = metadata.inputs.map((input): InputSpec => {
    const declared = unbatched(input.shape);
    const given = shapes[input.name];
    if (!given) return { name: input.name, datatype: input.datatype as DataType, dims: declared };
    if (given.length !== declared.length || given.some((d, i) => declared[i] !== -1 && declared[i] !== d)) {
      throw new PerfInputError(
        `--shape ${input.name}:${given.join(",")} does not fit the input's shape [${declared.join(",")}]`,
      );
    }
    return { name: input.name, datatype: input.datatype as DataType, dims: given };
  });
  const outputs = metadata.outputs.map((output): OutputSpec => {
    const dims = unbatched(output.shape);
    const datatype = output.datatype as DataType;
    const fixed = datatype !== "BYTES" && dims.every((d) => d >= 0);
    return {
      name: output.name,
      datatype,
      byteSize: fixed ? batchSize * elementCount(dims) * (elementType(datatype)?.byteSize ?? Number.NaN) : undefined,
    };
  });
  return { batched, inputs, outputs };
}

function requireFixed(spec: InputSpec): number[] {
  if (spec.dims.some((d) => d < 0)) {
    throw new PerfInputError(
      `input '${spec.name}' has variable dimensions [${spec.dims.join(",")}]: give its shape with --shape ${spec.name}:...`,
    );
  }
  return spec.dims;
}

/** Little-endian bytes of `values` as `datatype` (numbers, bigints, booleans, or strings for BYTES). */
export function encodeValues(datatype: DataType, values: readonly unknown[]): Uint8Array {
  const bytes = (view: ArrayBufferView) => new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  const num = (v: unknown) => (typeof v === "boolean" ? (v ? 1 : 0) : Number(v));
  switch (datatype) {
    case "BYTES":
      return encodeBytes(values.map((v) => (v instanceof Uint8Array ? v : String(v))));
    case "BOOL":
      return Uint8Array.from(values, (v) => (num(v) ? 1 : 0));
    case "UINT8":
      return Uint8Array.from(values, num);
    case "INT8":
      return bytes(Int8Array.from(values, num));
    case "UINT16":
      return bytes(Uint16Array.from(values, num));
    case "INT16":
      return bytes(Int16Array.from(values, num));
    case "UINT32":
      return bytes(Uint32Array.from(values, num));
    case "INT32":
      return bytes(Int32Array.from(values, num));
    case "UINT64":
      return bytes(BigUint64Array.from(values, (v) => BigInt(typeof v === "bigint" ? v : Math.trunc(num(v)))));
    case "INT64":
      return bytes(BigInt64Array.from(values, (v) => BigInt(typeof v === "bigint" ? v : Math.trunc(num(v)))));
    case "FP16":
      return bytes(Uint16Array.from(values, (v) => toFloat16Bits(num(v))));
    case "BF16":
      return bytes(Uint16Array.from(values, (v) => toBfloat16Bits(num(v))));
    case "FP32":
      return bytes(Float32Array.from(values, num));
    case "FP64":
      return bytes(Float64Array.from(values, num));
    default:
      throw new PerfInputError(`unsupported datatype '${String(datatype)}'`);
  }
}

const LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/** Values for `count` elements: random (integers 0–99, floats in [0, 1), strings of `stringLength`) or zeros. */
function generated(datatype: DataType, count: number, random: boolean, stringLength: number): unknown[] {
  if (datatype === "BYTES") {
    return Array.from({ length: count }, () =>
      random
        ? Array.from({ length: stringLength }, () => LETTERS[Math.floor(Math.random() * LETTERS.length)]).join("")
        : "0".repeat(stringLength),
    );
  }
  if (!random) return new Array<number>(count).fill(0);
  const float = datatype.startsWith("FP") || datatype === "BF16";
  if (datatype === "BOOL") return Array.from({ length: count }, () => Math.random() < 0.5);
  return Array.from({ length: count }, () => (float ? Math.random() : Math.floor(Math.random() * 100)));
}

function batchShape(shape: ModelShape, dims: number[], batchSize: number): number[] {
  return shape.batched ? [batchSize, ...dims] : dims;
}

/** One set of generated inputs (random or zero), reused by every request as perf_analyzer does. */
export function generatedInputs(
  shape: ModelShape,
  batchSize: number,
  random: boolean,
  stringLength: number,
): InputSet[] {
  const set: InputSet = {};
  for (const spec of shape.inputs) {
    const full = batchShape(shape, requireFixed(spec), batchSize);
    const values = generated(spec.datatype, elementCount(full), random, stringLength);
    set[spec.name] = { datatype: spec.datatype, shape: full, data: encodeValues(spec.datatype, values) };
  }
  return [set];
}

function flatten(value: unknown): unknown[] {
  return Array.isArray(value) ? value.flatMap(flatten) : [value];
}

/** One entry's tensor for one input: its bytes and its shape without the batch dimension. */
function entryTensor(spec: InputSpec, value: unknown, where: string): { dims: number[]; data: Uint8Array } {
  let dims = spec.dims;
  let content: unknown = value;
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const object = value as { content?: unknown; shape?: unknown; b64?: unknown };
    if (Array.isArray(object.shape)) dims = object.shape.map(Number);
    if (typeof object.b64 === "string") {
      const data = new Uint8Array(Buffer.from(object.b64, "base64"));
      if (dims.some((d) => d < 0)) {
        throw new PerfInputError(`${where}: b64 data of '${spec.name}' needs a "shape" or --shape`);
      }
      return { dims, data };
    }
    if (!("content" in object)) throw new PerfInputError(`${where}: '${spec.name}' needs "content" or "b64"`);
    content = object.content;
  }
  const values = flatten(content);
  if (dims.some((d) => d < 0)) {
    // perf_analyzer's rule: a single variable dimension takes the number of values.
    if (dims.filter((d) => d < 0).length !== 1) {
      throw new PerfInputError(`${where}: '${spec.name}' has several variable dimensions: give its "shape"`);
    }
    const fixed = elementCount(dims.filter((d) => d >= 0));
    dims = dims.map((d) => (d < 0 ? values.length / fixed : d));
    if (!dims.every(Number.isInteger)) {
      throw new PerfInputError(`${where}: ${values.length} values of '${spec.name}' do not fill its shape`);
    }
  }
  if (values.length !== elementCount(dims)) {
    throw new PerfInputError(
      `${where}: '${spec.name}' has ${values.length} values, its shape [${dims.join(",")}] needs ${elementCount(dims)}`,
    );
  }
  return { dims, data: encodeValues(spec.datatype, values) };
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0] as Uint8Array;
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

/**
 * Input sets from a perf_analyzer JSON data file's text. Each entry is one batch element (for a
 * batching model): request k batches entries k, k+1, ... k+b-1 (wrapping), so every entry is sent.
 */
export function fileInputs(shape: ModelShape, batchSize: number, text: string, source = "input data"): InputSet[] {
  let file: DataFile;
  try {
    file = JSON.parse(text) as DataFile;
  } catch (error) {
    throw new PerfInputError(`${source}: not JSON (${(error as Error).message})`);
  }
  if (!file || !Array.isArray(file.data) || file.data.length === 0) {
    throw new PerfInputError(`${source}: expected {"data": [{"INPUT": [...], ...}, ...]} with at least one entry`);
  }
  const entries = file.data.map((entry, i) => {
    const where = `${source}, data[${i}]`;
    if (entry === null || typeof entry !== "object") throw new PerfInputError(`${where}: not an object`);
    const tensors: Record<string, { dims: number[]; data: Uint8Array }> = {};
    for (const spec of shape.inputs) {
      if (!(spec.name in entry)) throw new PerfInputError(`${where}: no value for input '${spec.name}'`);
      tensors[spec.name] = entryTensor(spec, entry[spec.name], where);
    }
    return tensors;
  });
  const count = shape.batched ? batchSize : 1;
  return entries.map((_, k) => {
    const set: InputSet = {};
    for (const spec of shape.inputs) {
      const rows = Array.from({ length: count }, (_, j) => entries[(k + j) % entries.length]?.[spec.name]);
      const dims = rows[0]?.dims ?? [];
      if (rows.some((r) => r?.dims.join(",") !== dims.join(","))) {
        throw new PerfInputError(`${source}: entries batched together have different shapes for '${spec.name}'`);
      }
      set[spec.name] = {
        datatype: spec.datatype,
        shape: batchShape(shape, dims, batchSize),
        data: concat(rows.map((r) => r?.data ?? new Uint8Array(0))),
      };
    }
    return set;
  });
}

/** The input sets for `source`; `readText` reads a data file. */
export async function loadInputs(
  shape: ModelShape,
  batchSize: number,
  source: InputDataSource,
  stringLength: number,
  readText: (path: string) => Promise<string>,
): Promise<InputSet[]> {
  if (source.kind !== "file") return generatedInputs(shape, batchSize, source.kind === "random", stringLength);
  let text: string;
  try {
    text = await readText(source.path);
  } catch (error) {
    throw new PerfInputError(`cannot read --input-data '${source.path}': ${(error as Error).message}`);
  }
  return fileInputs(shape, batchSize, text, source.path);
}

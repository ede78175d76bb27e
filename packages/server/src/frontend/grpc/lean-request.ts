// ModelInfer's request bytes straight to a core request, for the shape nearly every client sends:
// model name, version, id, inputs (name, datatype, packed shape) with one raw buffer each, and
// requested outputs by name. protobuf-es's `fromBinary` and `requestFromGrpc` cost 3.9–5.4 µs for
// `simple`'s request on Node 26 (reflection, a message object per tensor, bigint dims); this is one
// pass (0.8 µs, `bench/grpc-codec.ts`). Whatever it does not cover — parameters, typed contents,
// shared memory, dims of 2^49 or more or negative, unpacked shapes, repeated scalars, non-ASCII
// strings, unknown fields, raw buffers not one per input, any malformed byte — it leaves to that
// general path (undefined), so every error and every uncommon request is answered exactly as
// before. `grpc-codec.fuzz.test.ts` holds it to that path over random and damaged encodings.
import type { InferenceRequest } from "../../core/inference-request.js";
import type { Tensor } from "../../core/tensor.js";

const ASCII = new TextDecoder("utf-8");

/** Thrown inside the walk when the bytes leave what it covers; never escapes {@link leanModelInfer}. */
const UNCOVERED = Symbol("uncovered");

/** A cursor over the message; every read checks the end it may not pass. */
class Reader {
  at: number;
  constructor(
    readonly bytes: Uint8Array,
    start: number,
  ) {
    this.at = start;
  }

  /** A varint below 2^49 (seven bytes at most); anything longer is not covered. */
  varint(end: number): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 7; i++) {
      if (this.at >= end) throw UNCOVERED;
      const b = this.bytes[this.at++] as number;
      value += (b & 0x7f) * scale;
      if (b < 0x80) return value;
      scale *= 128;
    }
    throw UNCOVERED;
  }

  /** A length-delimited field's end, checked against the enclosing end. */
  delimited(end: number): number {
    const length = this.varint(end);
    const stop = this.at + length;
    if (stop > end) throw UNCOVERED;
    return stop;
  }

  /** A string field of ASCII bytes (other bytes are left to protobuf-es's UTF-8 handling). */
  ascii(end: number): string {
    const stop = this.delimited(end);
    const start = this.at;
    for (let i = start; i < stop; i++) if ((this.bytes[i] as number) >= 0x80) throw UNCOVERED;
    this.at = stop;
    // Short names character by character; a long one (a hostile client's megabytes) in one native call.
    if (stop - start > 32) return ASCII.decode(this.bytes.subarray(start, stop));
    let text = "";
    for (let i = start; i < stop; i++) text += String.fromCharCode(this.bytes[i] as number);
    return text;
  }
}

/** A field's tag as (number << 3) | wire type; length-delimited fields have wire type 2. */
const tag = (field: number) => (field << 3) | 2;

/**
 * The core request a `ModelInferRequest`'s bytes describe, when they are of the covered shape
 * (see the file's header); undefined otherwise, for `decodeModelInfer` and `requestFromGrpc`.
 * Raw inputs are views of `bytes`.
 */
export function leanModelInfer(bytes: Uint8Array): InferenceRequest | undefined {
  try {
    return walk(new Reader(bytes, 0), bytes.byteLength);
  } catch (error) {
    if (error === UNCOVERED) return undefined;
    throw error;
  }
}

function walk(r: Reader, end: number): InferenceRequest {
  let modelName: string | undefined;
  let modelVersion: string | undefined;
  let id: string | undefined;
  const inputs: Tensor[] = [];
  const outputs: InferenceRequest["outputs"] = [];
  const raw: Uint8Array[] = [];
  while (r.at < end) {
    const key = r.varint(end);
    if (key === tag(1) && modelName === undefined) modelName = r.ascii(end);
    else if (key === tag(2) && modelVersion === undefined) modelVersion = r.ascii(end);
    else if (key === tag(3) && id === undefined) id = r.ascii(end);
    else if (key === tag(5)) inputs.push(input(r, r.delimited(end)));
    else if (key === tag(6)) outputs.push({ name: output(r, r.delimited(end)), parameters: {} });
    else if (key === tag(7)) {
      const stop = r.delimited(end);
      raw.push(r.bytes.subarray(r.at, stop));
      r.at = stop;
    } else throw UNCOVERED;
  }
  if (raw.length !== inputs.length) throw UNCOVERED;
  inputs.forEach((tensor, i) => {
    tensor.data = raw[i] as Uint8Array;
  });
  return {
    modelName: modelName ?? "",
    modelVersion: modelVersion ?? "",
    id: id ?? "",
    parameters: {},
    inputs,
    outputs,
  };
}

function input(r: Reader, end: number): Tensor {
  let name: string | undefined;
  let datatype: string | undefined;
  let shape: number[] | undefined;
  while (r.at < end) {
    const key = r.varint(end);
    if (key === tag(1) && name === undefined) name = r.ascii(end);
    else if (key === tag(2) && datatype === undefined) datatype = r.ascii(end);
    else if (key === tag(3) && shape === undefined) {
      const stop = r.delimited(end);
      shape = [];
      while (r.at < stop) shape.push(r.varint(stop));
    } else throw UNCOVERED;
  }
  return {
    name: name ?? "",
    datatype: (datatype ?? "") as Tensor["datatype"],
    shape: shape ?? [],
    data: new Uint8Array(0),
    parameters: {},
  };
}

function output(r: Reader, end: number): string {
  let name: string | undefined;
  while (r.at < end) {
    const key = r.varint(end);
    if (key === tag(1) && name === undefined) name = r.ascii(end);
    else throw UNCOVERED;
  }
  return name ?? "";
}

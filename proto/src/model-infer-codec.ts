// ModelInfer's messages on the wire, with their tensor bytes left where they are, and the shape
// nearly every call has read and written in one pass. Both sides use it: the server reads requests
// and writes responses, the client writes requests and reads responses.
//
// Pieces: a `ModelInferRequest` / `ModelInferResponse` is encoded as a head (every field but the
// raw contents) followed by one length-delimited record per raw buffer, each buffer its own piece:
// protobuf lets the values of a repeated field come in any order relative to other fields, so the
// concatenation of the pieces is a valid encoding of the whole message, and a writer can put the
// pieces on a socket one after another without copying a tensor into an encoded message.
//
// One pass: the model's name, version and id, tensors by name, datatype and packed shape,
// requested outputs by name, and raw contents as views, without protobuf-es's reflection. A
// response's own parameters are written and read too when each is a bool, a string or a small
// whole number (a decoupled model's every response carries `triton_final_response`). Whatever it
// does not cover — other parameters, typed contents, a dim that is negative or 2^49 or more, an
// unpacked shape, a repeated scalar, a non-ASCII string, an unknown field, any broken byte — goes
// through protobuf-es's `toBinary` and `fromBinary` (the readers answer undefined), so errors and
// uncommon messages are handled exactly as there; `fromBinary`'s `bytes` values are views of the
// input (`subarray`) too, so the raw contents of a decoded message are views of the received bytes
// either way. The heads written here are byte-equal to `toBinary`'s and what is read equals
// `fromBinary`'s (the property tests in model-infer-codec.test.ts and the server's
// grpc-codec.fuzz.test.ts).
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  type ModelInferRequest,
  ModelInferRequestSchema,
  type ModelInferResponse,
  ModelInferResponseSchema,
  type ModelStreamInferResponse,
} from "./gen/inference/grpc_service_pb.js";

/** `raw_input_contents` is field 7 of `ModelInferRequest`, length-delimited: tag (7 << 3) | 2. */
export const RAW_INPUT_CONTENTS_TAG = 0x3a;
/** `raw_output_contents` is field 6 of `ModelInferResponse`, length-delimited: tag (6 << 3) | 2. */
export const RAW_OUTPUT_CONTENTS_TAG = 0x32;

/** An encoded message as pieces to write in order; their bytes together are the message. */
export interface EncodedPieces {
  pieces: Uint8Array[];
  /** The sum of the pieces' lengths: the message's encoded size. */
  byteLength: number;
}

/** A `ModelInferRequest` as pieces: the head, then each `raw_input_contents` buffer as it is (not copied). */
export function encodeModelInferRequest(message: ModelInferRequest): EncodedPieces {
  const lean =
    isEmpty(message.parameters) &&
    message.inputs.every((i) => isEmpty(i.parameters) && i.contents === undefined) &&
    message.outputs.every((o) => isEmpty(o.parameters))
      ? writeModelInferRequestHead(
          message,
          message.inputs,
          message.outputs.map((o) => o.name),
        )
      : undefined;
  const head = lean ?? toBinary(ModelInferRequestSchema, { ...message, rawInputContents: [] });
  return withRawContents(head, RAW_INPUT_CONTENTS_TAG, message.rawInputContents);
}

/** A `ModelInferResponse` as pieces: the head, then each `raw_output_contents` buffer as it is (not copied). */
export function encodeModelInferResponse(message: ModelInferResponse): EncodedPieces {
  const lean = message.outputs.every((o) => isEmpty(o.parameters) && o.contents === undefined)
    ? writeModelInferResponseHead(message, message.outputs)
    : undefined;
  const head = lean ?? toBinary(ModelInferResponseSchema, { ...message, rawOutputContents: [] });
  return withRawContents(head, RAW_OUTPUT_CONTENTS_TAG, message.rawOutputContents);
}

/**
 * Decode a `ModelInferResponse`; its `raw_output_contents` are views of `bytes`, not copies.
 *
 * @throws the decoder's error when the bytes are not a valid message.
 */
export function decodeModelInferResponse(bytes: Uint8Array): ModelInferResponse {
  return readModelInferResponse(bytes) ?? fromBinary(ModelInferResponseSchema, bytes);
}

/**
 * `head`, then for each buffer its tag and varint length (all in one small Buffer, which HTTP/2
 * writes as it is) and the buffer itself.
 */
export function withRawContents(head: Uint8Array, tag: number, raws: readonly Uint8Array[]): EncodedPieces {
  if (raws.length === 0) return { pieces: [head], byteLength: head.byteLength };
  // A tag byte and at most 5 varint bytes (lengths below 2^32) per buffer.
  const prefixes = Buffer.allocUnsafe(raws.length * 6);
  const pieces: Uint8Array[] = [head];
  let byteLength = head.byteLength;
  let at = 0;
  for (const raw of raws) {
    const start = at;
    prefixes[at++] = tag;
    at = writeVarint(prefixes, at, raw.byteLength);
    pieces.push(prefixes.subarray(start, at), raw);
    byteLength += at - start + raw.byteLength;
  }
  return { pieces, byteLength };
}

/** A length-delimited field's tag and length, as bytes (a Buffer, which HTTP/2 writes as it is). */
export function fieldPrefix(tag: number, length: number): Buffer {
  const out = Buffer.allocUnsafe(1 + varintSize(length));
  out[0] = tag;
  writeVarint(out, 1, length);
  return out;
}

/** `error_message` (1) and `infer_response` (2) of `ModelStreamInferResponse`, length-delimited. */
const ERROR_MESSAGE_TAG = 0x0a;
const INFER_RESPONSE_TAG = 0x12;
const utf8 = new TextEncoder();

/**
 * A `ModelStreamInferResponse` as pieces: its error message, then its `infer_response` as
 * {@link encodeModelInferResponse} writes it (raw outputs not copied).
 */
export function encodeModelStreamInferResponse(message: ModelStreamInferResponse): EncodedPieces {
  const pieces: Uint8Array[] = [];
  let byteLength = 0;
  if (message.errorMessage !== "") {
    const text = utf8.encode(message.errorMessage);
    const prefix = fieldPrefix(ERROR_MESSAGE_TAG, text.byteLength);
    pieces.push(prefix, text);
    byteLength += prefix.byteLength + text.byteLength;
  }
  if (message.inferResponse) {
    const inner = encodeModelInferResponse(message.inferResponse);
    const prefix = fieldPrefix(INFER_RESPONSE_TAG, inner.byteLength);
    pieces.push(prefix, ...inner.pieces);
    byteLength += prefix.byteLength + inner.byteLength;
  }
  return { pieces, byteLength };
}

/** A tensor's name, datatype and shape: what a covered message says about each input or output. */
export interface LeanTensor {
  name: string;
  datatype: string;
  shape: readonly (number | bigint)[];
}

/** A message's fields 1–3 (model name, version, id) and its tensors. */
export interface LeanHead {
  modelName: string;
  modelVersion: string;
  id: string;
}

/** A covered `ModelInferRequest`: its inputs (with their raw contents, one each) and requested output names. */
export interface LeanInferRequest extends LeanHead {
  inputs: { name: string; datatype: string; shape: number[]; data: Uint8Array }[];
  outputs: string[];
}

const ASCII = new TextDecoder("utf-8");
/** Thrown inside a walk when the bytes leave what it covers; never escapes this module. */
const UNCOVERED = Symbol("uncovered");
/** Fields 1–3 of both messages, 5 their tensors; a length-delimited field's tag is (field << 3) | 2. */
const tag = (field: number) => (field << 3) | 2;

/** A cursor over a message; every read checks the end it may not pass. */
class Reader {
  at = 0;
  constructor(readonly bytes: Uint8Array) {}

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
    // Short names character by character; a long one (a hostile peer's megabytes) in one native call.
    if (stop - start > 32) return ASCII.decode(this.bytes.subarray(start, stop));
    let text = "";
    for (let i = start; i < stop; i++) text += String.fromCharCode(this.bytes[i] as number);
    return text;
  }

  /** A length-delimited field's bytes, as a view. */
  view(end: number): Uint8Array {
    const stop = this.delimited(end);
    const bytes = this.bytes.subarray(this.at, stop);
    this.at = stop;
    return bytes;
  }

  /** An embedded tensor message: name (1), datatype (2), packed shape (3), each at most once. */
  tensor(end: number): { name: string; datatype: string; shape: number[] } {
    let name: string | undefined;
    let datatype: string | undefined;
    let shape: number[] | undefined;
    while (this.at < end) {
      const key = this.varint(end);
      if (key === tag(1) && name === undefined) name = this.ascii(end);
      else if (key === tag(2) && datatype === undefined) datatype = this.ascii(end);
      else if (key === tag(3) && shape === undefined) {
        const stop = this.delimited(end);
        shape = [];
        while (this.at < stop) shape.push(this.varint(stop));
      } else throw UNCOVERED;
    }
    return { name: name ?? "", datatype: datatype ?? "", shape: shape ?? [] };
  }

  /**
   * A `parameters` map entry of ASCII key (1) and `InferParameter` (2), each once; the parameter
   * a bool, ASCII string or int64/uint64 below 2^49, its one member once. `__proto__` is left to
   * protobuf-es: as an own key of a plain object it would set the object's prototype.
   */
  parameter(end: number, into: Record<string, unknown>): void {
    let key: string | undefined;
    let value: { case: string; value: unknown } | undefined;
    while (this.at < end) {
      const field = this.varint(end);
      if (field === tag(1) && key === undefined) key = this.ascii(end);
      else if (field === tag(2) && value === undefined) {
        const stop = this.delimited(end);
        const member = this.varint(stop);
        if (member === 1 << 3) {
          const flag = this.varint(stop);
          if (flag > 1) throw UNCOVERED;
          value = { case: "boolParam", value: flag === 1 };
        } else if (member === 2 << 3) value = { case: "int64Param", value: BigInt(this.varint(stop)) };
        else if (member === tag(3)) value = { case: "stringParam", value: this.ascii(stop) };
        else if (member === 5 << 3) value = { case: "uint64Param", value: BigInt(this.varint(stop)) };
        else throw UNCOVERED;
        if (this.at !== stop) throw UNCOVERED;
      } else throw UNCOVERED;
    }
    if (key === undefined || value === undefined || key === "__proto__") throw UNCOVERED;
    into[key] = { $typeName: "inference.InferParameter", parameterChoice: value };
  }

  /** An embedded requested output: its name (1) alone. */
  name(end: number): string {
    let name: string | undefined;
    while (this.at < end) {
      const key = this.varint(end);
      if (key === tag(1) && name === undefined) name = this.ascii(end);
      else throw UNCOVERED;
    }
    return name ?? "";
  }
}

/**
 * Fields 1–3, tensors at 5, names at `namesField` (requests: 6), raw contents at `rawField`, and
 * with `parameters` (responses) the message's own parameters at 4.
 */
function walk(
  bytes: Uint8Array,
  namesField: number | undefined,
  rawField: number,
  parameters?: Record<string, unknown>,
) {
  const r = new Reader(bytes);
  const end = bytes.byteLength;
  const head: (string | undefined)[] = [undefined, undefined, undefined];
  const tensors: { name: string; datatype: string; shape: number[] }[] = [];
  const names: string[] = [];
  const raw: Uint8Array[] = [];
  while (r.at < end) {
    const key = r.varint(end);
    const field = key >> 3;
    if ((key & 7) !== 2) throw UNCOVERED;
    if (field >= 1 && field <= 3 && head[field - 1] === undefined) head[field - 1] = r.ascii(end);
    else if (field === 4 && parameters) r.parameter(r.delimited(end), parameters);
    else if (field === 5) tensors.push(r.tensor(r.delimited(end)));
    else if (field === namesField) names.push(r.name(r.delimited(end)));
    else if (field === rawField) raw.push(r.view(end));
    else throw UNCOVERED;
  }
  const [modelName = "", modelVersion = "", id = ""] = head;
  return { modelName, modelVersion, id, tensors, names, raw };
}

/** Runs a walk; undefined when the bytes are not covered. */
function covered<T>(read: () => T): T | undefined {
  try {
    return read();
  } catch (error) {
    if (error === UNCOVERED) return undefined;
    throw error;
  }
}

/**
 * A `ModelInferRequest`'s bytes as a {@link LeanInferRequest} when they are of the covered shape,
 * with exactly one raw buffer per input (views of `bytes`); undefined for anything else.
 */
export function readModelInferRequest(bytes: Uint8Array): LeanInferRequest | undefined {
  return covered(() => {
    const { tensors, names, raw, ...head } = walk(bytes, 6, 7);
    if (raw.length !== tensors.length) throw UNCOVERED;
    return { ...head, inputs: tensors.map((t, i) => ({ ...t, data: raw[i] as Uint8Array })), outputs: names };
  });
}

/**
 * A `ModelInferResponse`'s bytes as the message `fromBinary` would give (raw outputs as views of
 * `bytes`) when they are of the covered shape; undefined for anything else.
 */
export function readModelInferResponse(bytes: Uint8Array): ModelInferResponse | undefined {
  return covered(() => {
    const parameters: ModelInferResponse["parameters"] = {};
    const { tensors, raw, modelName, modelVersion, id } = walk(bytes, undefined, 6, parameters);
    return {
      $typeName: "inference.ModelInferResponse",
      modelName,
      modelVersion,
      id,
      parameters,
      outputs: tensors.map(({ name, datatype, shape }) => ({
        $typeName: "inference.ModelInferResponse.InferOutputTensor",
        name,
        datatype,
        shape: shape.map(BigInt),
        parameters: {},
        contents: undefined,
      })),
      rawOutputContents: raw,
    };
  });
}

/**
 * The head (every field but the raw contents) of a `ModelInferRequest` without parameters or typed
 * contents: model name, version, id, the inputs and the requested outputs by name. Undefined when a
 * dim is not a whole number from 0 to 2^53; then `toBinary` writes it.
 */
export function writeModelInferRequestHead(head: LeanHead, inputs: readonly LeanTensor[], outputs: readonly string[]) {
  return writeHead(head, inputs, outputs);
}

/** A parameter as protobuf-es holds it (`InferParameter`'s oneof). */
interface LeanParameter {
  parameterChoice: { case: string | undefined; value?: unknown };
}

/**
 * The same for a `ModelInferResponse`: its outputs, before `raw_output_contents`, and its own
 * parameters (a decoupled model's every response carries `triton_final_response`) when each is a
 * bool, a string, or an int64 or uint64 from 0 to 2^53; otherwise undefined, for `toBinary` (the
 * outputs' own parameters are not looked at: the caller passes outputs without them).
 */
export function writeModelInferResponseHead(
  head: LeanHead & { parameters: object },
  outputs: readonly LeanTensor[],
): Uint8Array | undefined {
  if (isEmpty(head.parameters)) return writeHead(head, outputs, []);
  const entries = parameterEntries(head.parameters);
  return entries && writeHead(head, outputs, [], entries);
}

/** Each map entry's bytes (key, then the `InferParameter`), in the map's order; undefined past what is covered. */
function parameterEntries(parameters: object): Uint8Array[] | undefined {
  const entries: Uint8Array[] = [];
  for (const key in parameters) {
    // Anything but protobuf-es's InferParameter (a server's own parameter values, say) is not covered.
    const choice = ((parameters as Record<string, unknown>)[key] as Partial<LeanParameter> | undefined)
      ?.parameterChoice;
    if (typeof choice !== "object" || choice === null) return undefined;
    // The value's field: bool 1 and the unsigned whole numbers (int64 2, uint64 5) as varints, string 3.
    let field: number;
    let number = 0;
    let text = "";
    if (choice.case === "boolParam" && typeof choice.value === "boolean") {
      field = 1;
      number = choice.value ? 1 : 0;
    } else if (choice.case === "stringParam" && typeof choice.value === "string") {
      field = 3;
      text = choice.value;
    } else if ((choice.case === "int64Param" || choice.case === "uint64Param") && typeof choice.value === "bigint") {
      field = choice.case === "int64Param" ? 2 : 5;
      number = Number(choice.value);
      if (!Number.isSafeInteger(number) || number < 0) return undefined;
    } else {
      return undefined;
    }
    // A oneof's member is written even when it holds its type's default.
    const textBytes = utf8Size(text);
    const valueSize = field === 3 ? 1 + varintSize(textBytes) + textBytes : 1 + varintSize(number);
    // A map entry's key is written even when empty.
    const keyBytes = utf8Size(key);
    const keySize = 1 + varintSize(keyBytes) + keyBytes;
    const entry = Buffer.allocUnsafe(keySize + 1 + varintSize(valueSize) + valueSize);
    entry[0] = tag(1);
    let at = writeVarint(entry, 1, keyBytes);
    at += entry.write(key, at, "utf8");
    entry[at++] = tag(2);
    at = writeVarint(entry, at, valueSize);
    if (field === 3) {
      entry[at++] = tag(3);
      at = writeVarint(entry, at, textBytes);
      entry.write(text, at, "utf8");
    } else {
      entry[at++] = field << 3;
      writeVarint(entry, at, number);
    }
    entries.push(entry);
  }
  return entries;
}

/** Whether an object (a parameter map) has no keys. */
function isEmpty(map: object): boolean {
  for (const _ in map) return false;
  return true;
}

/** Fields 1–3, the parameter map's encoded entries at 4, tensors at 5, names at 6. */
function writeHead(
  head: LeanHead,
  tensors: readonly LeanTensor[],
  names: readonly string[],
  entries: readonly Uint8Array[] = [],
): Uint8Array | undefined {
  let size = stringFieldSize(head.modelName) + stringFieldSize(head.modelVersion) + stringFieldSize(head.id);
  for (const entry of entries) size += 1 + varintSize(entry.byteLength) + entry.byteLength;
  const tensorSizes: number[] = [];
  const shapeSizes: number[] = [];
  for (const t of tensors) {
    let shapeSize = 0;
    for (const d of t.shape) {
      const n = Number(d);
      if (!Number.isSafeInteger(n) || n < 0) return undefined;
      shapeSize += varintSize(n);
    }
    const tensorSize =
      stringFieldSize(t.name) +
      stringFieldSize(t.datatype) +
      (shapeSize > 0 ? 1 + varintSize(shapeSize) + shapeSize : 0);
    shapeSizes.push(shapeSize);
    tensorSizes.push(tensorSize);
    size += 1 + varintSize(tensorSize) + tensorSize;
  }
  for (const name of names) {
    const nameSize = stringFieldSize(name);
    size += 1 + varintSize(nameSize) + nameSize;
  }
  const out = Buffer.allocUnsafe(size);
  let at = writeStringField(out, 0, tag(1), head.modelName);
  at = writeStringField(out, at, tag(2), head.modelVersion);
  at = writeStringField(out, at, tag(3), head.id);
  for (const entry of entries) {
    out[at++] = tag(4);
    at = writeVarint(out, at, entry.byteLength);
    out.set(entry, at);
    at += entry.byteLength;
  }
  tensors.forEach((t, i) => {
    out[at++] = tag(5);
    at = writeVarint(out, at, tensorSizes[i] as number);
    at = writeStringField(out, at, tag(1), t.name);
    at = writeStringField(out, at, tag(2), t.datatype);
    const shapeSize = shapeSizes[i] as number;
    if (shapeSize === 0) return;
    out[at++] = tag(3);
    at = writeVarint(out, at, shapeSize);
    for (const d of t.shape) at = writeVarint(out, at, Number(d));
  });
  for (const name of names) {
    out[at++] = tag(6);
    at = writeVarint(out, at, stringFieldSize(name));
    at = writeStringField(out, at, tag(1), name);
  }
  return out;
}

/** The bytes of a varint of `n` (a whole number from 0 to 2^53). */
function varintSize(n: number): number {
  let size = 1;
  for (let v = n; v >= 0x80; v = Math.floor(v / 128)) size++;
  return size;
}

/** Writes the varint of `n` at `start`; returns where it ends. */
function writeVarint(out: Uint8Array, start: number, n: number): number {
  let at = start;
  let v = n;
  while (v >= 0x80) {
    out[at++] = (v % 128) | 0x80;
    v = Math.floor(v / 128);
  }
  out[at++] = v;
  return at;
}

/** UTF-8 bytes of `text` (lone surrogates as U+FFFD, as TextEncoder writes them). */
function utf8Size(text: string): number {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) >= 0x80) return Buffer.byteLength(text, "utf8");
  return text.length;
}

/** A string field's encoded size; proto3 leaves an empty one out. */
function stringFieldSize(text: string): number {
  if (text === "") return 0;
  const bytes = utf8Size(text);
  return 1 + varintSize(bytes) + bytes;
}

function writeStringField(out: Buffer, start: number, key: number, text: string): number {
  if (text === "") return start;
  const bytes = utf8Size(text);
  out[start] = key;
  let at = writeVarint(out, start + 1, bytes);
  // Short ASCII (a name, a datatype) byte by byte; anything longer or wider in one native call.
  if (bytes === text.length && bytes <= 32) for (let i = 0; i < bytes; i++) out[at++] = text.charCodeAt(i);
  else at += out.write(text, at, "utf8");
  return at;
}

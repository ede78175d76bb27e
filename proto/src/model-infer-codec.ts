// ModelInfer's messages on the wire with their tensor bytes left where they are. A
// `ModelInferRequest` / `ModelInferResponse` is encoded as a head (every field but the raw
// contents, through `toBinary`) followed by one length-delimited record per raw buffer, each
// buffer its own piece: protobuf lets the values of a repeated field come in any order relative to
// other fields, so the concatenation of the pieces is a valid encoding of the whole message, and a
// writer can put the pieces on a socket one after another without copying a tensor into an encoded
// message. The head of a message without parameters or typed contents is written in one pass, and
// such a response read in one pass (model-infer-lean.ts); any other goes through `toBinary` and
// `fromBinary`, whose `bytes` values are views of the input (`subarray`) too, so the raw contents
// of a decoded message are views of the received bytes either way.
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  type ModelInferRequest,
  ModelInferRequestSchema,
  type ModelInferResponse,
  ModelInferResponseSchema,
} from "./gen/inference/grpc_service_pb.js";
import {
  isEmpty,
  readModelInferResponse,
  varintSize,
  writeModelInferRequestHead,
  writeModelInferResponseHead,
  writeVarint,
} from "./model-infer-lean.js";

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

import type { IncomingMessage } from "node:http";
import { createUnzip } from "node:zlib";
import { InferenceError } from "../../core/errors.js";
import type { Encoding } from "./compression.js";

/** The default `--http-max-input-size`: 64 MiB. */
export const DEFAULT_MAX_INPUT_SIZE = 1 << 26;

/** A request body received into one buffer of our own. */
export interface Body {
  /** The whole buffer: `offset` free bytes, then the body. It belongs to this request alone. */
  buffer: ArrayBuffer;
  offset: number;
  /** The body (decompressed), a view of `buffer` at `offset`. */
  bytes: Uint8Array;
}

function ignore(): void {}

/** The client went away before its request body arrived; there is nobody to answer. */
export class ClientGone extends Error {
  constructor() {
    super("the client closed the connection");
  }
}

export interface BodyOptions {
  /** The largest body accepted, after decompression (and before it). */
  limit: number;
  encoding: Encoding;
  /**
   * Free bytes to leave before the body, so the caller can place it: the binary tensor data
   * after a JSON header of known length then starts 8-byte aligned, or a raw BYTES input gets
   * room for its length prefix.
   */
  offset?: number;
}

/**
 * A body announced larger than this gets its buffer only once part of it has arrived (see
 * {@link BodyReceiver}); one up to this size gets it at once.
 */
export const EAGER_BODY_BYTES = 64 * 1024;
/** The share of an announced body that must arrive before its whole buffer is allocated. */
const RESERVE_FRACTION = 16;

/**
 * Where a body of known length goes: one `ArrayBuffer` of `offset` free bytes and the body,
 * filled in place as chunks arrive. `Content-Length` is the client's word, so the buffer for a
 * body over {@link EAGER_BODY_BYTES} is allocated only once 1/16 of the body has arrived; the
 * chunks before are held as they came and copied in then, so each byte is still copied once.
 * A client that announces 64 MiB must send 4 MiB before the server allocates it. Allocated at the
 * client's word, 64 MiB announced with one byte sent cost the server ~2.5 ms of CPU a connection
 * (V8 collects garbage for each such buffer) and held its address space until the connection went.
 */
export class BodyReceiver {
  #buffer: Uint8Array | undefined;
  #held: Uint8Array[] | undefined;
  #filled = 0;

  constructor(
    readonly offset: number,
    readonly length: number,
  ) {
    if (length <= EAGER_BODY_BYTES) this.#buffer = new Uint8Array(new ArrayBuffer(offset + length));
  }

  /** Whether the whole body has arrived. */
  get complete(): boolean {
    return this.#filled === this.length;
  }

  /** Take what `chunk` holds of the body's remaining bytes; returns how many bytes were taken. */
  write(chunk: Uint8Array): number {
    const take = Math.min(chunk.byteLength, this.length - this.#filled);
    const part = take === chunk.byteLength ? chunk : chunk.subarray(0, take);
    if (this.#buffer) this.#buffer.set(part, this.offset + this.#filled);
    else if (this.#held) this.#held.push(part);
    else this.#held = [part];
    this.#filled += take;
    if (!this.#buffer && this.#filled * RESERVE_FRACTION >= this.length) this.#reserve();
    return take;
  }

  /** The body received so far (the whole body once {@link complete}). */
  body(): Body {
    if (!this.#buffer) this.#reserve();
    const buffer = this.#buffer as Uint8Array;
    return {
      buffer: buffer.buffer as ArrayBuffer,
      offset: this.offset,
      bytes: buffer.subarray(this.offset, this.offset + this.#filled),
    };
  }

  #reserve(): void {
    const buffer = new Uint8Array(new ArrayBuffer(this.offset + this.length));
    let at = this.offset;
    for (const part of this.#held ?? []) {
      buffer.set(part, at);
      at += part.byteLength;
    }
    this.#held = undefined;
    this.#buffer = buffer;
  }
}

/**
 * Receive a request body into a single `ArrayBuffer` allocated here, never holding more than
 * the limit. With a `Content-Length` and no compression, chunks go into place through a
 * {@link BodyReceiver}; otherwise they are collected (decompressed on the way) and copied once at
 * the end.
 *
 * @throws {@link InferenceError} INPUT_SIZE_EXCEEDED (400), or INVALID_ARG for an empty compressed
 * body; {@link ClientGone} when the connection closes first.
 */
export function readBody(req: IncomingMessage, options: BodyOptions): Promise<Body> {
  const offset = options.offset ?? 0;
  // A body of unknown length is refused at the first byte past the limit: `size` is that count.
  const tooLarge = (size: number) => new InferenceError("INPUT_SIZE_EXCEEDED", { size, limit: options.limit });
  const declared = req.headers["content-length"];
  if (declared !== undefined && Number(declared) > options.limit) return Promise.reject(tooLarge(Number(declared)));

  // An aborted request emits 'error'; answering it is not possible, crashing on it is wrong.
  req.on("error", ignore);
  return new Promise<Body>((resolve, reject) => {
    let settled = false;
    const finish = (error: Error | undefined, body?: Body) => {
      if (settled) return;
      settled = true;
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onGone);
      req.off("close", onClose);
      if (error) reject(error);
      else resolve(body as Body);
    };

    // Where the (decompressed) bytes go: straight into place when the size is known.
    const exact = options.encoding === "identity" && declared !== undefined ? Number(declared) : -1;
    const direct = exact >= 0 ? new BodyReceiver(offset, exact) : undefined;
    const chunks: Uint8Array[] = [];
    let size = 0;
    const accept = (chunk: Uint8Array): boolean => {
      if (size + chunk.length > options.limit || (direct && size + chunk.length > direct.length)) {
        finish(tooLarge(size + chunk.length));
        return false;
      }
      if (direct) direct.write(chunk);
      else chunks.push(chunk);
      size += chunk.length;
      return true;
    };
    const assemble = (): Body => {
      if (direct) return direct.body();
      const buffer = new ArrayBuffer(offset + size);
      const all = new Uint8Array(buffer);
      let at = offset;
      for (const chunk of chunks) {
        all.set(chunk, at);
        at += chunk.length;
      }
      return { buffer, offset, bytes: all.subarray(offset) };
    };

    // Decompression: like Triton (zlib's auto-detecting inflate), a corrupt stream keeps what
    // was decompressed before the error.
    const unzip = options.encoding === "identity" ? undefined : createUnzip();
    let raw = 0;
    if (unzip) {
      unzip.on("data", (chunk: Buffer) => {
        if (!accept(chunk)) unzip.destroy();
      });
      unzip.on("end", () => finish(undefined, assemble()));
      unzip.on("error", () => finish(undefined, assemble()));
    }

    const onData = (chunk: Buffer) => {
      if (!unzip) {
        accept(chunk);
        return;
      }
      raw += chunk.length;
      if (raw > options.limit) {
        unzip.destroy();
        finish(tooLarge(raw));
        return;
      }
      unzip.write(chunk);
    };
    const onEnd = () => {
      if (!unzip) {
        if (direct && !direct.complete) finish(new ClientGone());
        else finish(undefined, assemble());
      } else if (raw === 0) {
        unzip.destroy();
        finish(new InferenceError("NOTHING_TO_DECOMPRESS"));
      } else {
        unzip.end();
      }
    };
    const onGone = () => {
      unzip?.destroy();
      finish(new ClientGone());
    };
    const onClose = () => {
      if (!req.complete) onGone();
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onGone);
    req.on("close", onClose);
  });
}

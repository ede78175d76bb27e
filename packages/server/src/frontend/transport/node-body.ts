import type { IncomingMessage } from "node:http";
import { createUnzip } from "node:zlib";
import { InferenceError } from "../../base/errors.js";
import { BodyReceiver } from "./body-receiver.js";
import { type Body, type BodyOptions, ClientGone } from "./http-exchange.js";

function ignore(): void {}

/**
 * Receive a request body into a single `ArrayBuffer` allocated here, never holding more than
 * the limit. With a `Content-Length` and no compression, chunks go into place through a
 * {@link BodyReceiver}; otherwise they are collected (decompressed on the way) and copied once at
 * the end.
 *
 * @throws {@link InferenceError} past a limit (400: `limitError`, or DECOMPRESSED_TOO_LARGE), or INVALID_ARG for an empty compressed
 * body; {@link ClientGone} when the connection closes first.
 */
export function readBody(req: IncomingMessage, options: BodyOptions): Promise<Body> {
  const offset = options.offset ?? 0;
  // A body of unknown length is refused at the first byte past the limit: `size` is that count.
  const tooLarge = (size: number) =>
    new InferenceError(options.limitError ?? "INPUT_SIZE_EXCEEDED", { size, limit: options.limit });
  const decompressedLimit = options.decompressedLimit ?? options.limit;
  const tooLargeDecompressed = (size: number) =>
    options.decompressedLimit === undefined
      ? tooLarge(size)
      : new InferenceError("DECOMPRESSED_TOO_LARGE", { limit: options.decompressedLimit });
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
      if (unzip && size + chunk.length > decompressedLimit) {
        finish(tooLargeDecompressed(size + chunk.length));
        return false;
      }
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

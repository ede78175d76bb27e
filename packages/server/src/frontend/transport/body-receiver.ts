// Where a request body of known length goes: the one buffer both HTTP/1 paths fill in place.

/** A request body received into one buffer of our own. */
export interface Body {
  /** The whole buffer: `offset` free bytes, then the body. It belongs to this request alone. */
  buffer: ArrayBuffer;
  offset: number;
  /** The body (decompressed), a view of `buffer` at `offset`. */
  bytes: Uint8Array;
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

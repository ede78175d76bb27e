// The chunks of one event stream waiting for its client: bounded in bytes. A client that stops
// reading lets them pile up until the bound; then the stream is dropped and they are freed.

/** Chunks in order, read once as an async iterable; at most `maxBytes` waiting. */
export class EventBuffer implements AsyncIterable<Uint8Array> {
  readonly #chunks: Uint8Array[] = [];
  readonly #maxBytes: number;
  readonly #overflow: () => void;
  #bytes = 0;
  #ended = false;
  #wake: (() => void) | undefined;

  /** `overflow` is called once, when a push would pass `maxBytes`: the stream is then over. */
  constructor(maxBytes: number, overflow: () => void) {
    this.#maxBytes = maxBytes;
    this.#overflow = overflow;
  }

  /** Bytes waiting. */
  get bytes(): number {
    return this.#bytes;
  }

  get ended(): boolean {
    return this.#ended;
  }

  /** Queue a chunk; false (and the stream ended, its chunks dropped) when it does not fit. */
  push(chunk: Uint8Array): boolean {
    if (this.#ended) return false;
    if (this.#bytes + chunk.byteLength > this.#maxBytes) {
      this.#chunks.length = 0;
      this.#bytes = 0;
      this.end();
      this.#overflow();
      return false;
    }
    this.#chunks.push(chunk);
    this.#bytes += chunk.byteLength;
    this.#wake?.();
    return true;
  }

  /** No more chunks: the reader ends after those queued. */
  end(): void {
    this.#ended = true;
    this.#wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Uint8Array> {
    for (;;) {
      const chunk = this.#chunks.shift();
      if (chunk) {
        this.#bytes -= chunk.byteLength;
        yield chunk;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      this.#wake = undefined;
    }
  }
}

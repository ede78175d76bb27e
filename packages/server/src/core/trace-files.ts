import { createWriteStream, type WriteStream } from "node:fs";
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";

/**
 * The trace files (Triton's `TraceFile`), mode `triton`. `<file>` is one JSON array that traces
 * are appended to as they are written, opened (truncated) at the first and closed with `]` when
 * the server stops; `<file>.<n>` are whole arrays of `log_frequency` traces each, numbered from 0
 * per path and run. Writes are asynchronous and in order; a failure is logged and tracing goes on.
 */
export class TraceFiles {
  readonly #main = new Map<string, WriteStream>();
  readonly #next = new Map<string, number>();
  readonly #writes = new Set<Promise<void>>();
  readonly #onError: (message: string) => void;

  /** `onError` receives `failed creating trace file: <reason>` (Triton's log text). */
  constructor(onError: (message: string) => void) {
    this.#onError = onError;
  }

  /** Append traces (`,`-joined objects) to the array in `path`. */
  append(path: string, text: string): void {
    const full = resolve(path);
    let stream = this.#main.get(full);
    if (stream) {
      stream.write(`,${text}`);
      return;
    }
    stream = createWriteStream(full, { flags: "w" });
    stream.on("error", (error) => this.#onError(`failed creating trace file: ${error.message}`));
    this.#main.set(full, stream);
    stream.write(`[${text}`);
  }

  /** Write traces to `<path>.<n>`, the next number for that path, as a whole array. */
  writeIndexed(path: string, texts: readonly string[]): void {
    const full = resolve(path);
    const n = this.#next.get(full) ?? 0;
    this.#next.set(full, n + 1);
    const write = writeFile(`${full}.${n}`, `[${texts.join(",")}]`).catch((error: Error) =>
      this.#onError(`failed creating trace file: ${error.message}`),
    );
    this.#writes.add(write);
    void write.finally(() => this.#writes.delete(write));
  }

  /** Close every array with `]` and wait for every write to reach its file. */
  async close(): Promise<void> {
    const ends = [...this.#main.values()].map(
      (stream) =>
        new Promise<void>((done) => {
          if (stream.destroyed) return done();
          stream.end("]", () => done());
          stream.once("error", () => done());
        }),
    );
    this.#main.clear();
    await Promise.all([...ends, ...this.#writes]);
  }
}

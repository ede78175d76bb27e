import { Worker } from "node:worker_threads";
import type { Logger } from "../../log.js";
import type { FromWorker, OrtSessionSettings, ToWorker, ValueInfo, WireTensor } from "./ort-messages.js";

/**
 * The worker entry, built into dist/; resolved from the package root so that it is found both
 * from dist/ and when tests load the TypeScript sources.
 */
const WORKER_URL = new URL("../../../dist/backend/onnxruntime/ort-worker.js", import.meta.url);

interface InFlight {
  resolve(result: { outputs: WireTensor[]; inferNs: bigint }): void;
  reject(error: Error): void;
}

/** One ONNX Runtime session in its own worker thread. */
export class OrtSession {
  readonly #worker: Worker;
  readonly #inFlight = new Map<number, InFlight>();
  #nextId = 1;
  #loaded?: { resolve(io: { inputs: ValueInfo[]; outputs: ValueInfo[] }): void; reject(error: Error): void };
  /** The model's inputs and outputs, as the session reports them. */
  io: { inputs: ValueInfo[]; outputs: ValueInfo[] } = { inputs: [], outputs: [] };
  #closed = false;
  /** Why the worker is gone, once it is: later runs fail at once instead of waiting for it. */
  #dead?: string;

  private constructor(
    readonly name: string,
    log: Logger,
  ) {
    this.#worker = new Worker(WORKER_URL, { name: `ort:${name}` });
    this.#worker.on("message", (message: FromWorker) => this.#onMessage(message));
    this.#worker.on("error", (error) => {
      this.#dead = `instance ${name} failed: ${error.message}`;
      this.#failAll(new Error(this.#dead));
    });
    // A result that cannot be read would leave its request waiting forever: fail what is in flight.
    this.#worker.on("messageerror", (error) =>
      this.#failAll(new Error(`instance ${name} sent a result that could not be read: ${error.message}`)),
    );
    this.#worker.on("exit", (code) => {
      if (!this.#closed) {
        this.#dead ??= `instance ${name} exited unexpectedly (code ${code})`;
        log.error(`onnxruntime ${this.#dead}`);
        this.#failAll(new Error(this.#dead));
      }
    });
  }

  /** Start a worker and load the model in it. */
  static async open(name: string, path: string, settings: OrtSessionSettings, log: Logger): Promise<OrtSession> {
    const session = new OrtSession(name, log);
    try {
      session.io = await new Promise<{ inputs: ValueInfo[]; outputs: ValueInfo[] }>((resolve, reject) => {
        session.#loaded = { resolve, reject };
        session.#post({ kind: "load", path, settings });
      });
    } catch (error) {
      await session.close();
      throw error;
    }
    return session;
  }

  /** Run the session on `feeds`, moving the `transfer` buffers to the worker (see `workerView`). */
  run(
    feeds: WireTensor[],
    fetches: string[],
    transfer: ArrayBuffer[],
  ): Promise<{ outputs: WireTensor[]; inferNs: bigint }> {
    if (this.#closed) return Promise.reject(new Error(`instance ${this.name} is closed`));
    if (this.#dead) return Promise.reject(new Error(this.#dead));
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#inFlight.set(id, { resolve, reject });
      this.#post({ kind: "run", id, feeds, fetches }, transfer);
    });
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#failAll(new Error(`instance ${this.name} is closed`));
    await this.#worker.terminate();
  }

  #post(message: ToWorker, transfer: ArrayBuffer[] = []): void {
    this.#worker.postMessage(message, transfer);
  }

  #onMessage(message: FromWorker): void {
    if (message.kind === "loaded") {
      this.#loaded?.resolve(message);
      this.#loaded = undefined;
    } else if (message.kind === "result") {
      this.#inFlight.get(message.id)?.resolve(message);
      this.#inFlight.delete(message.id);
    } else if (message.id === undefined) {
      this.#loaded?.reject(new Error(message.message));
      this.#loaded = undefined;
    } else {
      this.#inFlight.get(message.id)?.reject(new Error(message.message));
      this.#inFlight.delete(message.id);
    }
  }

  #failAll(error: Error): void {
    this.#loaded?.reject(error);
    this.#loaded = undefined;
    for (const pending of this.#inFlight.values()) pending.reject(error);
    this.#inFlight.clear();
  }
}

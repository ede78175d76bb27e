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

type SessionIO = { inputs: ValueInfo[]; outputs: ValueInfo[] };

/**
 * One ONNX Runtime session in its own worker thread. If the worker dies (an error it cannot
 * report, a message it cannot read), what it held fails, a fresh worker loads the model again and
 * runs wait for it; only a model that no longer loads leaves the instance failing every run.
 */
export class OrtSession {
  #worker?: Worker;
  readonly #inFlight = new Map<number, InFlight>();
  #nextId = 1;
  #loaded?: { resolve(io: SessionIO): void; reject(error: Error): void };
  /** The model's inputs and outputs, as the session reports them. */
  io: SessionIO = { inputs: [], outputs: [] };
  #opened = false;
  #closed = false;
  /** While a fresh worker loads the model after a death: runs wait for it. */
  #restarting?: Promise<void>;
  /** Why the instance cannot run any more: its model failed to load again after a death. */
  #dead?: string;
  /** Workers started after deaths. */
  restarts = 0;

  private constructor(
    readonly name: string,
    readonly path: string,
    readonly settings: OrtSessionSettings,
    readonly log: Logger,
  ) {}

  /** Start a worker and load the model in it. */
  static async open(name: string, path: string, settings: OrtSessionSettings, log: Logger): Promise<OrtSession> {
    const session = new OrtSession(name, path, settings, log);
    try {
      session.io = await session.#start();
    } catch (error) {
      await session.close();
      throw error;
    }
    session.#opened = true;
    return session;
  }

  /** Run the session on `feeds`, moving the `transfer` buffers to the worker (see `workerView`). */
  async run(
    feeds: WireTensor[],
    fetches: string[],
    transfer: ArrayBuffer[],
  ): Promise<{ outputs: WireTensor[]; inferNs: bigint }> {
    if (this.#restarting) await this.#restarting;
    if (this.#closed) throw new Error(`instance ${this.name} is closed`);
    if (this.#dead) throw new Error(this.#dead);
    const worker = this.#worker as Worker;
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#inFlight.set(id, { resolve, reject });
      try {
        worker.postMessage({ kind: "run", id, feeds, fetches } satisfies ToWorker, transfer);
      } catch (error) {
        this.#inFlight.delete(id);
        reject(error as Error);
      }
    });
  }

  #start(): Promise<SessionIO> {
    const worker = new Worker(WORKER_URL, { name: `ort:${this.name}` });
    this.#worker = worker;
    worker.on("message", (message: FromWorker) => {
      if (worker === this.#worker) this.#onMessage(message);
    });
    worker.on("error", (error) => this.#onDeath(worker, `failed: ${error.message}`));
    // A result that cannot be read would leave its request waiting forever.
    worker.on("messageerror", (error) =>
      this.#onDeath(worker, `sent a result that could not be read (${error.message})`),
    );
    worker.on("exit", (code) => this.#onDeath(worker, `exited unexpectedly (code ${code})`));
    return new Promise<SessionIO>((resolve, reject) => {
      this.#loaded = { resolve, reject };
      worker.postMessage({ kind: "load", path: this.path, settings: this.settings } satisfies ToWorker);
    });
  }

  /** The worker is gone: fail what it held and, once the model had loaded, load it in a fresh one. */
  #onDeath(worker: Worker, what: string): void {
    if (worker !== this.#worker || this.#closed) return;
    this.#worker = undefined;
    void worker.terminate();
    const opened = this.#opened;
    this.#failAll(new Error(`instance ${this.name} ${what}${opened ? "; the instance is restarting" : ""}`));
    if (!opened) return;
    this.log.error(`onnxruntime instance ${this.name} ${what}; restarting it`);
    this.restarts++;
    this.#restarting = this.#start().then(
      () => {
        this.#restarting = undefined;
      },
      (error: Error) => {
        this.#restarting = undefined;
        this.#dead = `instance ${this.name} could not be restarted: ${error.message}`;
        this.log.error(`onnxruntime ${this.#dead}`);
      },
    );
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#failAll(new Error(`instance ${this.name} is closed`));
    await this.#worker?.terminate();
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

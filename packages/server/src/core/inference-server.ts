/** What `/v2` and the ServerMetadata RPC report. */
export interface ServerMetadata {
  /** `--id`; `triton` by default, because Triton's client examples check the name. */
  name: string;
  version: string;
  /** Protocol extensions this server implements, in Triton's order. */
  extensions: string[];
}

/** Options for {@link InferenceServer}. */
export interface InferenceServerOptions {
  /** Server name reported in metadata (tritonserver's `--id`). Default `triton`. */
  id?: string;
}

/** Galley's release, reported as the server version. */
export const GALLEY_VERSION = "0.1.0";

/**
 * The protocol-neutral core. Frontends (HTTP, gRPC) translate wire requests into calls on this
 * object and never hold state of their own. This foundation version knows liveness, readiness
 * and metadata; the model repository and `infer` arrive with the server-core issue.
 */
export class InferenceServer {
  readonly id: string;
  #live = true;
  #ready = true;

  constructor(options: InferenceServerOptions = {}) {
    this.id = options.id ?? "triton";
  }

  /** The process is up and able to answer; false only once shutdown has finished. */
  isLive(): boolean {
    return this.#live;
  }

  /** The server accepts inference requests; false from the moment shutdown starts. */
  isReady(): boolean {
    return this.#ready && this.#live;
  }

  metadata(): ServerMetadata {
    return { name: this.id, version: GALLEY_VERSION, extensions: [] };
  }

  /** Stop being ready (new work is refused) while in-flight work drains. */
  beginShutdown(): void {
    this.#ready = false;
  }

  /** Shutdown finished: the server is no longer live. */
  stop(): void {
    this.#ready = false;
    this.#live = false;
  }
}

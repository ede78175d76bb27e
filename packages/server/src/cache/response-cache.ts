import { createHash } from "node:crypto";
import type { InferenceRequest } from "../base/inference-request.js";
import type { Tensor } from "../base/tensor.js";

/** Parameters that change when or where a request runs, never what it computes. */
const SCHEDULING_PARAMETERS = new Set(["priority", "timeout", "binary_data_output"]);

interface Entry {
  outputs: Tensor[];
  bytes: number;
}

/**
 * Triton's local response cache (`--cache-config local,size=N`): responses of models with
 * `response_cache { enable: true }`, keyed by model, version, every input (name, datatype, shape,
 * bytes), the requested outputs and the parameters that can change the result; evicted least
 * recently used first, by bytes. Cached tensors are private copies and are never moved.
 */
export class ResponseCache {
  readonly #entries = new Map<string, Entry>();
  #bytes = 0;

  constructor(readonly capacityBytes: number) {}

  /** Bytes held now. */
  get bytes(): number {
    return this.#bytes;
  }

  get size(): number {
    return this.#entries.size;
  }

  /** The key of a request to a model version. */
  key(request: InferenceRequest, model: string, version: number): string {
    const hash = createHash("sha256");
    hash.update(`${model}\0${version}\0`);
    const inputs = [...request.inputs].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const input of inputs) {
      hash.update(`${input.name}\0${input.datatype}\0${input.shape.join(",")}\0${input.data.byteLength}\0`);
      hash.update(input.data);
    }
    for (const output of request.outputs) hash.update(`out\0${output.name}\0${stable(output.parameters)}\0`);
    const parameters = Object.fromEntries(
      Object.entries(request.parameters).filter(([k]) => !SCHEDULING_PARAMETERS.has(k)),
    );
    hash.update(`params\0${stable(parameters)}`);
    return hash.digest("hex");
  }

  /** The cached outputs for `key` (and mark them recently used), or undefined. */
  get(key: string): Tensor[] | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    return entry.outputs;
  }

  /** Keep copies of `outputs` under `key`, evicting the least recently used entries to make room. */
  put(key: string, outputs: readonly Tensor[]): void {
    const bytes = outputs.reduce((n, o) => n + o.data.byteLength + o.name.length + 64, 0);
    if (bytes > this.capacityBytes || this.#entries.has(key)) return;
    while (this.#bytes + bytes > this.capacityBytes) {
      const oldest = this.#entries.keys().next().value as string;
      this.#bytes -= this.#entries.get(oldest)?.bytes ?? 0;
      this.#entries.delete(oldest);
    }
    this.#entries.set(key, {
      outputs: outputs.map((o) => ({ ...o, data: new Uint8Array(o.data), movable: false })),
      bytes,
    });
    this.#bytes += bytes;
  }
}

function stable(value: Record<string, unknown>): string {
  return JSON.stringify(
    Object.keys(value)
      .sort()
      .map((k) => [k, String(value[k])]),
  );
}

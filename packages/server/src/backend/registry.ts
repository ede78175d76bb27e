import { PYTHON_BASED_RUNTIME } from "@galley/config";
import type { Backend } from "./backend.js";

/**
 * The backends a server has, by name: its own, then those `resolve` finds for other names
 * (Triton's Python-based backends, `<backend directory>/<name>/model.py`, run by the Python
 * backend), asked each time a name is looked up. The one owner of which backend serves a config:
 * `runtime: "model.py"` asks for the name's Python-based backend even where the server has a
 * backend of that name (`backend: "pytorch"` then serves a PyTorch-2 `model.py`, not TorchScript),
 * as in Triton.
 */
export class BackendRegistry {
  readonly #backends = new Map<string, Backend>();
  readonly #resolve: ((name: string) => Backend | undefined) | undefined;

  constructor(backends: readonly Backend[] = [], resolve?: (name: string) => Backend | undefined) {
    for (const backend of backends) this.register(backend);
    this.#resolve = resolve;
  }

  register(backend: Backend): void {
    this.#backends.set(backend.name, backend);
  }

  /**
   * The backend for a config's `backend` and `runtime`: with no runtime, the server's own, else a
   * Python-based one; with `runtime: "model.py"`, the Python-based one only.
   */
  get(name: string, runtime = ""): Backend | undefined {
    if (runtime === PYTHON_BASED_RUNTIME) return this.#resolve?.(name);
    return this.#backends.get(name) ?? (runtime === "" ? this.#resolve?.(name) : undefined);
  }

  has(name: string): boolean {
    return this.get(name) !== undefined;
  }

  /** The server's own backends (not those found by `resolve`). */
  names(): Set<string> {
    return new Set(this.#backends.keys());
  }
}

import type { Backend } from "./backend.js";

/** The `runtime` value that asks for a backend's Python-based runtime (Triton's `model.py`). */
export const PYTHON_BASED_RUNTIME = "model.py";

/**
 * The backends a server has, by name, and which one serves a config: the one owner of that
 * choice. A name may also have a Python-based runtime (Triton's `backends/<name>/model.py`, run
 * by the Python backend): `runtime: "model.py"` picks it (`backend: "pytorch"` then serves a
 * PyTorch-2 `model.py` instead of a TorchScript file), and a name with no backend of its own falls
 * back to it, as Triton falls back when the backend's shared library is absent.
 */
export class BackendRegistry {
  readonly #backends = new Map<string, Backend>();
  readonly #pythonBased = new Map<string, Backend>();

  constructor(backends: readonly Backend[] = [], pythonBased: readonly Backend[] = []) {
    for (const backend of backends) this.register(backend);
    for (const backend of pythonBased) this.#pythonBased.set(backend.name, backend);
  }

  register(backend: Backend): void {
    this.#backends.set(backend.name, backend);
  }

  /** The backend for a config's `backend` and `runtime` (empty: the backend's own). */
  get(name: string, runtime = ""): Backend | undefined {
    if (runtime === PYTHON_BASED_RUNTIME) return this.#pythonBased.get(name);
    return this.#backends.get(name) ?? (runtime === "" ? this.#pythonBased.get(name) : undefined);
  }

  /** The backend names a config may name (with a runtime of their own or Python-based). */
  names(): Set<string> {
    return new Set([...this.#backends.keys(), ...this.#pythonBased.keys()]);
  }

  /** The names that have a Python-based runtime. */
  pythonBasedNames(): Set<string> {
    return new Set(this.#pythonBased.keys());
  }
}

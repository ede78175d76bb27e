import type { Backend } from "./backend.js";

/** The backends a server has, by name. */
export class BackendRegistry {
  readonly #backends = new Map<string, Backend>();

  constructor(backends: readonly Backend[] = []) {
    for (const backend of backends) this.register(backend);
  }

  register(backend: Backend): void {
    this.#backends.set(backend.name, backend);
  }

  get(name: string): Backend | undefined {
    return this.#backends.get(name);
  }

  names(): Set<string> {
    return new Set(this.#backends.keys());
  }
}

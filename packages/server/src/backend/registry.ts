import type { Backend } from "./backend.js";

/**
 * The backends a server has, by name: its own, then those `resolve` finds for other names
 * (Triton's Python-based backends in `--backend-directory`), asked each time a name is looked up.
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

  /** The backend named so: the server's own wins over one `resolve` finds. */
  get(name: string): Backend | undefined {
    return this.#backends.get(name) ?? this.#resolve?.(name);
  }

  has(name: string): boolean {
    return this.get(name) !== undefined;
  }

  /** The server's own backends (not those found by `resolve`). */
  names(): Set<string> {
    return new Set(this.#backends.keys());
  }
}

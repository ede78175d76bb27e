// Live events of the jobs this server runs, for the event streams: progress and previews as they
// happen. Status changes made elsewhere (another replica) reach streams through the store.

/** One event of a job. */
export type JobEvent =
  | { type: "progress"; progress: number }
  | { type: "preview"; progress: number; url: string }
  | { type: "final" };

type Listener = (event: JobEvent) => void;

/** Subscribers by job id. */
export class JobEvents {
  readonly #listeners = new Map<string, Set<Listener>>();

  /** Listen to a job's events; the returned function stops listening. */
  subscribe(id: string, listener: Listener): () => void {
    let set = this.#listeners.get(id);
    if (!set) {
      set = new Set();
      this.#listeners.set(id, set);
    }
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.#listeners.get(id) === set) this.#listeners.delete(id);
    };
  }

  emit(id: string, event: JobEvent): void {
    for (const listener of this.#listeners.get(id) ?? []) listener(event);
  }
}

import { InferenceError } from "../base/errors.js";
import type { LoadedModel } from "./loaded-model.js";

/** Triton's model states, as the repository index reports them. */
export type ModelState = "UNKNOWN" | "READY" | "UNAVAILABLE" | "LOADING" | "UNLOADING";

/** The reason an evicted version's index row gives (it is loaded again on demand). */
export const EVICTED_REASON = "evicted to fit the memory budget";
/** How the reason of a version whose load the memory budget refused begins (MEMORY_BUDGET_FULL). */
const NO_ROOM = "not enough room in --model-memory-budget";

/** A version's state and, when not READY, why. */
export interface VersionStatus {
  state: ModelState;
  reason: string;
}

/** One row of the repository index. */
export interface IndexEntry {
  name: string;
  version?: string;
  state?: ModelState;
  reason?: string;
}

/**
 * One model's versions: the state of every version Galley has tried (with the reason when not
 * READY) and the READY versions requests are routed to. Each transition of a load, a failed
 * reload, a swap and an unload is one method, so the states and the served set never disagree.
 */
export class ModelVersions {
  readonly #states = new Map<number, VersionStatus>();
  #ready = new Map<number, LoadedModel>();

  constructor(readonly name: string) {}

  /** Every version tried, with its state. */
  get states(): ReadonlyMap<number, VersionStatus> {
    return this.#states;
  }

  /** READY versions, by number. */
  get ready(): ReadonlyMap<number, LoadedModel> {
    return this.#ready;
  }

  /** True once a load of the model has been tried. */
  get known(): boolean {
    return this.#states.size > 0;
  }

  /**
   * With strict readiness: every version READY, except those unloaded on purpose, evicted, or
   * refused by the memory budget (they load again when a request needs them).
   */
  get allReady(): boolean {
    for (const status of this.#states.values()) {
      if (status.state === "READY" || status.reason === "unloaded") continue;
      if (status.reason === EVICTED_REASON || status.reason.startsWith(NO_ROOM)) continue;
      return false;
    }
    return true;
  }

  /**
   * A load failed before any version was tried (poll or config check): the versions it named
   * become UNAVAILABLE with its message, unless versions are still serving (then nothing changes).
   */
  pollFailed(versions: readonly number[], message: string): void {
    if (this.#ready.size > 0) return;
    for (const version of versions) this.#states.set(version, { state: "UNAVAILABLE", reason: message });
  }

  /**
   * A load of `version` began: LOADING, unless the version is serving (a reload loads beside it,
   * and it stays READY until the new one replaces it, as in Triton).
   */
  loading(version: number): void {
    if (!this.#ready.has(version)) this.#states.set(version, { state: "LOADING", reason: "" });
  }

  /**
   * A load of the model began: the versions it expects to load are LOADING from now on, before
   * its config is auto-completed or an ensemble's composing models are loaded, as Triton marks a
   * version LOADING before its backend is asked anything. Returns what puts back the state each
   * of them had before, for those the load ends without deciding (a load stopped before it tried
   * them, or whose final config does not select them).
   */
  beginLoad(versions: readonly number[]): () => void {
    const marks = new Map<number, { mark: VersionStatus; before: VersionStatus | undefined }>();
    for (const version of versions) {
      if (this.#ready.has(version)) continue;
      const mark: VersionStatus = { state: "LOADING", reason: "" };
      marks.set(version, { mark, before: this.#states.get(version) });
      this.#states.set(version, mark);
    }
    return () => {
      for (const [version, { mark, before }] of marks) {
        if (this.#states.get(version) !== mark) continue;
        if (before) this.#states.set(version, before);
        else this.#states.delete(version);
      }
    };
  }

  loaded(version: number): void {
    this.#states.set(version, { state: "READY", reason: "" });
  }

  failed(version: number, reason: string): void {
    this.#states.set(version, { state: "UNAVAILABLE", reason });
  }

  /** A reload failed: the versions that were serving are READY again. */
  keepServing(): void {
    for (const version of this.#ready.keys()) this.loaded(version);
  }

  /** Route requests to `loaded` from now on; resolves with the versions that served until now. */
  swap(loaded: Map<number, LoadedModel>): Map<number, LoadedModel> {
    const previous = this.#ready;
    this.#ready = loaded;
    return previous;
  }

  /** Unload the versions a swap replaced; those not in `current` end UNAVAILABLE `unloaded`. */
  async retire(previous: ReadonlyMap<number, LoadedModel>, current: ReadonlyMap<number, LoadedModel>): Promise<void> {
    for (const [version, old] of previous) {
      const kept = current.has(version);
      if (!kept) this.#states.set(version, { state: "UNLOADING", reason: "" });
      await old.unload();
      if (!kept) this.failed(version, "unloaded");
    }
  }

  /** Unload every READY version; every version ends UNAVAILABLE with `reason`. Resolves with how many were READY. */
  async unloadAll(reason: string): Promise<number> {
    const ready = this.#ready;
    this.#ready = new Map();
    for (const version of ready.keys()) this.#states.set(version, { state: "UNLOADING", reason: "" });
    await Promise.all([...ready.values()].map((m) => m.unload()));
    for (const version of this.#states.keys()) this.failed(version, reason);
    return ready.size;
  }

  /**
   * The version a request goes to: the given one, or the highest READY version.
   *
   * @throws {@link InferenceError} with Triton's messages (PROTOCOL.md §4.6).
   */
  resolve(version: string): LoadedModel {
    const name = this.name;
    if (!this.known) throw new InferenceError("MODEL_NOT_FOUND", { model: name });
    if (version === "") {
      const highest = [...this.#ready.keys()].sort((a, b) => b - a)[0];
      if (highest === undefined) throw new InferenceError("MODEL_NO_VERSIONS", { model: name });
      return this.#ready.get(highest) as LoadedModel;
    }
    if (!/^\d+$/.test(version) || Number(version) <= 0) {
      throw new InferenceError("BAD_VERSION", { version });
    }
    const number = Number(version);
    const loaded = this.#ready.get(number);
    if (loaded) return loaded;
    if (this.#states.has(number)) throw new InferenceError("MODEL_VERSION_NOT_READY", { model: name, version });
    throw new InferenceError("MODEL_VERSION_NOT_FOUND", { model: name, version });
  }

  /** The model's rows of the repository index, in version order; only its name when never tried. */
  rows(readyOnly: boolean): IndexEntry[] {
    if (!this.known) return readyOnly ? [] : [{ name: this.name }];
    const rows: IndexEntry[] = [];
    for (const [version, status] of [...this.#states].sort((a, b) => a[0] - b[0])) {
      if (readyOnly && status.state !== "READY") continue;
      rows.push({
        name: this.name,
        version: String(version),
        state: status.state,
        ...(status.reason ? { reason: status.reason } : {}),
      });
    }
    return rows;
  }
}

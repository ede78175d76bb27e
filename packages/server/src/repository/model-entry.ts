import type { ModelCopy } from "./model-repository.js";
import { ModelVersions } from "./model-versions.js";

/** What the model manager keeps for one model name, loaded or not. */
export interface ModelEntry {
  name: string;
  versions: ModelVersions;
  /** The files the last load saw (see `fingerprintOf`): polling reloads only when it changes. */
  fingerprint?: string;
  /** The downloaded copy (object storage) the serving versions read, removed on unload. */
  copy?: ModelCopy;
  /** A temporary folder holding `file:` overrides, removed on unload. */
  overrideFolder?: string;
  /** One per load queued or running, aborted by an unload or by shutdown so a stuck load cannot hold them. */
  aborts: Set<AbortController>;
  /** Models this one was loaded for (an ensemble's composing models), for `unload_dependents`. */
  loadedFor: Set<string>;
  /** Serialises loads and unloads of this model. */
  queue: Promise<void>;
  /** The last load came from overrides (a `config` or `file:` contents): it cannot be loaded again from disk. */
  overridden?: boolean;
  /** Loads queued or running: an ensemble that needs the model waits for them instead of reloading it. */
  loading: number;
}

/** A model never loaded yet. */
export function modelEntry(name: string): ModelEntry {
  return {
    name,
    versions: new ModelVersions(name),
    loadedFor: new Set(),
    aborts: new Set(),
    queue: Promise.resolve(),
    loading: 0,
  };
}

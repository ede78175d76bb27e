import type { ModelEntry } from "./model-entry.js";
import type { ModelRepository } from "./model-repository.js";

/** `--model-control-mode`. */
export type ControlMode = "none" | "poll" | "explicit";

/**
 * The models loaded at startup: every model found, except in explicit mode, which loads only
 * `--load-model` (`*` meaning every model found).
 */
export function startupModels(mode: ControlMode, found: Iterable<string>, requested: readonly string[] = []): string[] {
  if (mode !== "explicit" || requested.includes("*")) return [...found];
  return [...requested];
}

/** What a poll does to one model. */
export interface PollActions {
  load(name: string): Promise<unknown>;
  unload(name: string): Promise<unknown>;
}

/**
 * One poll (poll mode): load the models that are new or whose files changed since their last
 * load (a failed model is retried only then, as Triton does), unload the READY models whose
 * folder is gone (from a folder, or from object storage: compared by their objects' ETags and
 * modification times). Models loaded from overrides are left alone. Resolves once every load and
 * unload it started has settled.
 */
export async function pollRepositories(
  found: ReadonlyMap<string, readonly ModelRepository[]>,
  models: ReadonlyMap<string, ModelEntry>,
  entry: (name: string) => ModelEntry,
  actions: PollActions,
): Promise<void> {
  const work: Promise<unknown>[] = [];
  for (const [name, repositories] of found) {
    const model = entry(name);
    if (model.overrideFolder) continue;
    const only = repositories.length === 1 ? repositories[0] : undefined;
    // A model whose files cannot be listed now is left as it is until the next poll.
    const fingerprint = only ? await only.fingerprint(name).catch(() => model.fingerprint) : "duplicate";
    if (fingerprint !== model.fingerprint) work.push(actions.load(name).catch(() => undefined));
  }
  for (const [name, model] of models) {
    if (!found.has(name) && !model.overrideFolder && model.versions.ready.size > 0) work.push(actions.unload(name));
  }
  await Promise.all(work);
}

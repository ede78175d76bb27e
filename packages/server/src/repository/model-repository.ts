/**
 * A model's files as a folder the backends read: the model's own folder in a folder repository,
 * or a private copy downloaded from object storage (with {@link remove} to delete it).
 */
export interface ModelCopy {
  /** The model folder, named after the model. */
  path: string;
  /** What the files were when the copy was made (see {@link ModelRepository.fingerprint}). */
  fingerprint: string;
  /** Delete the copy (absent for a model read in place). */
  remove?(): Promise<void>;
}

/**
 * One `--model-repository`: a folder, or an `s3://` location. The manager lists models, polls
 * their fingerprints and loads from {@link fetch}'s folder the same way whatever holds them.
 */
export interface ModelRepository {
  /** As given to `--model-repository`, for messages. */
  readonly location: string;
  /** Fails with Triton's text when the repository cannot be read at all (checked at startup). */
  check(): Promise<void>;
  /** The model folders' names. Throws when the listing fails (a poll then changes nothing). */
  models(): Promise<string[]>;
  /** What changes when the model's files change: polling reloads a model only then. */
  fingerprint(name: string): Promise<string>;
  /** The model's files as a local folder; `signal` (an unload, shutdown) abandons a download. */
  fetch(name: string, signal?: AbortSignal): Promise<ModelCopy>;
}

/**
 * Model folders by name across every repository (a name in two repositories has two). A folder
 * repository that cannot be read has no models; an object store whose listing fails fails the
 * scan, so a poll during an outage unloads nothing.
 */
export async function scanRepositories(
  repositories: readonly ModelRepository[],
): Promise<Map<string, ModelRepository[]>> {
  const found = new Map<string, ModelRepository[]>();
  for (const repository of repositories) {
    for (const name of await repository.models()) found.set(name, [...(found.get(name) ?? []), repository]);
  }
  return found;
}

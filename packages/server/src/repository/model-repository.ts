import { stat } from "node:fs/promises";
import { join } from "node:path";
import { fingerprintOf, modelFolders } from "./repository-scan.js";
import { isS3Location } from "./s3-location.js";
import { S3Repository } from "./s3-repository.js";

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

/** A repository on the local file system: models are read where they are. */
export class FolderRepository implements ModelRepository {
  readonly location: string;

  constructor(location: string) {
    this.location = location;
  }

  async check(): Promise<void> {
    const info = await stat(this.location).catch(() => undefined);
    if (!info?.isDirectory())
      throw new Error(`failed to stat model repository path '${this.location}': not a directory`);
  }

  models(): Promise<string[]> {
    return modelFolders(this.location);
  }

  fingerprint(name: string): Promise<string> {
    return fingerprintOf(join(this.location, name));
  }

  async fetch(name: string): Promise<ModelCopy> {
    const path = join(this.location, name);
    return { path, fingerprint: await fingerprintOf(path) };
  }
}

/**
 * The repository a `--model-repository` names: `s3://…` is object storage, anything else a folder.
 *
 * @throws Error for an `s3://` path that names no bucket.
 */
export function openRepository(location: string): ModelRepository {
  return isS3Location(location) ? new S3Repository(location) : new FolderRepository(location);
}

import { FolderRepository } from "./folder-repository.js";
import type { ModelRepository } from "./model-repository.js";
import { isS3Location } from "./s3-location.js";
import { S3Repository } from "./s3-repository.js";

/**
 * The repository a `--model-repository` names: `s3://…` is object storage, anything else a folder.
 *
 * @throws Error for an `s3://` path that names no bucket.
 */
export function openRepository(location: string): ModelRepository {
  return isS3Location(location) ? new S3Repository(location) : new FolderRepository(location);
}

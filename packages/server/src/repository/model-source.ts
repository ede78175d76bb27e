import { fromModelConfigJson, type ModelSource, readModelSource } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import { InferenceError } from "../base/errors.js";
import type { LoadOverrides } from "../base/load-overrides.js";
import { configOverrideProblem } from "./config-override-problem.js";
import { writeFileOverrides } from "./file-overrides.js";
import type { ModelCopy, ModelRepository } from "./model-repository.js";

/** Where {@link modelSource} looks for a model. */
export interface SourceOptions {
  /** The repositories holding each model name (see `scanRepositories`). */
  scan(): Promise<ReadonlyMap<string, readonly ModelRepository[]>>;
  /** `--model-config-name`. */
  configName?: string;
}

/**
 * What a load starts from: the model's folder in the repositories (for object storage, a copy
 * downloaded now: `copy`, which the caller removes), or with `file:` overrides a temporary folder
 * holding them; with a config override, that config instead of the one in the repository.
 *
 * @throws {@link InferenceError} for a bad override; a plain Error when the folder cannot be found
 * or read (the load then answers as a failed poll).
 */
export async function modelSource(
  name: string,
  overrides: LoadOverrides,
  options: SourceOptions,
  signal?: AbortSignal,
): Promise<{ source: ModelSource; copy?: ModelCopy }> {
  if (overrides.files && overrides.files.size > 0 && overrides.config === undefined) {
    throw new InferenceError("FILE_OVERRIDE_NEEDS_CONFIG", { model: name });
  }
  let config: ModelConfig | undefined;
  if (overrides.config !== undefined) {
    try {
      config = fromModelConfigJson(overrides.config);
    } catch (error) {
      throw new InferenceError("LOAD_FAILED", {
        model: name,
        detail: `Invalid config override: ${configOverrideProblem(overrides.config, error)}`,
      });
    }
  }
  if (overrides.files && overrides.files.size > 0) {
    const folder = await writeFileOverrides(name, overrides.files);
    const source = await readModelSource(folder);
    return { source: { ...source, ...(config ? { config } : {}) } };
  }
  const repositories = (await options.scan()).get(name) ?? [];
  if (repositories.length === 0) throw new Error(`no model folder named '${name}' in the model repositories`);
  if (repositories.length > 1) throw new Error(`model '${name}' appears in more than one repository`);
  const copy = await (repositories[0] as ModelRepository).fetch(name, signal);
  try {
    const source = await readModelSource(copy.path, options.configName ? { configName: options.configName } : {});
    return { source: config ? { ...source, config } : source, copy };
  } catch (error) {
    await copy.remove?.();
    throw error;
  }
}

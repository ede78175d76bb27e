import { fromModelConfigJson, type ModelSource, readModelSource } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import { InferenceError } from "../base/errors.js";
import type { LoadOverrides } from "../base/load-overrides.js";
import { configOverrideProblem } from "./config-override-problem.js";
import { writeFileOverrides } from "./file-overrides.js";

/** Where {@link modelSource} looks for a model on disk. */
export interface SourceOptions {
  /** Model folders by name (see `scanRepositories`). */
  scan(): Promise<ReadonlyMap<string, readonly string[]>>;
  /** `--model-config-name`. */
  configName?: string;
}

/**
 * What a load starts from: the model's folder in the repositories, or with `file:` overrides a
 * temporary folder holding them; with a config override, that config instead of the one on disk.
 *
 * @throws {@link InferenceError} for a bad override; a plain Error when the folder cannot be found
 * or read (the load then answers as a failed poll).
 */
export async function modelSource(
  name: string,
  overrides: LoadOverrides,
  options: SourceOptions,
): Promise<ModelSource> {
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
    return { ...source, ...(config ? { config } : {}) };
  }
  const paths = (await options.scan()).get(name) ?? [];
  if (paths.length === 0) throw new Error(`no model folder named '${name}' in the model repositories`);
  if (paths.length > 1) throw new Error(`model '${name}' appears in more than one repository`);
  const source = await readModelSource(
    paths[0] as string,
    options.configName ? { configName: options.configName } : {},
  );
  return config ? { ...source, config } : source;
}

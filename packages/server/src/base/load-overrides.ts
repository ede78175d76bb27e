/**
 * A load request's overrides (Triton's `config` and `file:<version>/<path>` parameters), as every
 * layer that carries a load names them: the frontends, the core, the repository, and a scripted
 * model's `pb_utils.load_model`.
 */
export interface LoadOverrides {
  /** `config`: the model's config as JSON, replacing config.pbtxt. */
  config?: string;
  /** `file:<version>/<path>` contents, by parameter name. */
  files?: ReadonlyMap<string, Uint8Array>;
}

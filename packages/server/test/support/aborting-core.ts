// A stand-in core whose every inference waits until its request is cancelled: for the REST tests
// that check a client's disconnect aborts the request's signal.
import { InferenceError } from "../../src/base/errors.js";
import type { InferenceRequest } from "../../src/base/inference-request.js";
import type { InferenceServer, ModelView } from "../../src/core/inference-server.js";

/** The core, a promise of the first inference starting, and one of its signal aborting. */
export function abortingCore(model: ModelView): {
  core: Partial<InferenceServer>;
  started: Promise<void>;
  aborted: Promise<true>;
} {
  let start!: () => void;
  let abort!: (value: true) => void;
  const started = new Promise<void>((resolve) => {
    start = resolve;
  });
  const aborted = new Promise<true>((resolve) => {
    abort = resolve;
  });
  const core: Partial<InferenceServer> = {
    model: () => model,
    inferenceModel: () => model,
    infer: (request: InferenceRequest) =>
      new Promise((_, reject) => {
        request.signal?.addEventListener("abort", () => {
          abort(true);
          reject(new InferenceError("CANCELLED", { id: "<id_unknown>" }));
        });
        start();
      }),
  };
  return { core, started, aborted };
}

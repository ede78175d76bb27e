// What `galley config validate` learns from the server: whether each backend's library is here,
// asked of the backends themselves, so that validate fails a model where `galley serve` would,
// with the same words.
import type { ValidateContext } from "@galley/config";
import type { ModelConfig } from "@galley/proto";
import { onnxRuntimeMissing } from "../backend/onnxruntime/onnxruntime-backend.js";
import { pythonMissing } from "../backend/python/python-backend.js";
import { TORCH_AOTI_PLATFORM, torchMissing } from "../backend/pytorch/pytorch-backend.js";

/**
 * Each backend that needs a library (`GALLEY_BACKENDS` entries with `needs`), and its check: why
 * it cannot load models here, or undefined.
 */
export const BACKEND_LIBRARY_CHECKS: Readonly<Record<string, () => Promise<string | undefined>>> = {
  onnxruntime: async () => onnxRuntimeMissing(),
  python: () => pythonMissing(),
  pytorch: () => torchMissing(),
  /** `platform: "torch_aoti"`: libtorch with AOTInductor as well. */
  "pytorch:torch_aoti": () => torchMissing(undefined, TORCH_AOTI_PLATFORM),
  /** `runtime: "model.py"`: the PyTorch-2 runtime, python3 with torch. */
  "pytorch:model.py": () => pythonMissing(undefined, "torch"),
};

/**
 * `missingLibrary` for `runConfigCommand`: each backend checked once. A Python model with its own
 * `EXECUTION_ENV_PATH` runs that interpreter, which its load checks, not this.
 */
export function backendLibraries(
  checks: Readonly<Record<string, () => Promise<string | undefined>>> = BACKEND_LIBRARY_CHECKS,
): Required<ValidateContext> {
  const found = new Map<string, Promise<string | undefined>>();
  return {
    missingLibrary(backend: string, config: ModelConfig) {
      const key =
        config.runtime !== ""
          ? `${backend}:${config.runtime}`
          : backend === "pytorch" && config.platform === TORCH_AOTI_PLATFORM
            ? `pytorch:${TORCH_AOTI_PLATFORM}`
            : backend;
      const check = config.runtime !== "" ? checks[key] : (checks[key] ?? checks[backend]);
      const ownPython = backend === "python" || config.runtime !== "";
      if (!check || (ownPython && config.parameters.EXECUTION_ENV_PATH?.stringValue?.trim())) {
        return undefined;
      }
      let answer = found.get(key);
      if (!answer) {
        answer = check();
        found.set(key, answer);
      }
      return answer;
    },
  };
}

// The PyTorch backend's direct runner (the `DirectTarget` capability of the backend contract):
// loaded on a scripted model's worker thread for BLS calls marked `direct`, it runs a model's
// batches on the instances' native threads through @galley/backends-native's `torchDirect`, with
// the backend's own batch code, without the main thread and the model's scheduler.
import type { ModelConfig } from "@galley/proto";
import type { InferenceRequest } from "../../base/inference-request.js";
import { workerEntry } from "../../base/worker-entry.js";
import {
  DirectRouteGone,
  type DirectRun,
  type DirectRunner,
  type DirectRunnerHooks,
  type DirectTarget,
} from "../backend.js";
import { cudaGraphPlan } from "./cuda-graphs.js";
import { TorchBatches } from "./pytorch-batch.js";
import type { TorchIO } from "./pytorch-io.js";
import type { TorchExecution, TorchWireInput } from "./pytorch-messages.js";

/** What a direct runner of this backend needs: the instances' running modules, by id. */
export interface TorchDirectSpec {
  /** The ids of the instances' running modules (`torchDirect` of @galley/backends-native). */
  instances: number[];
  /** How the config meets forward (see `mapTorchIO`). */
  io: TorchIO;
  /** The GPU the instances run on; undefined on the CPU. */
  device: number | undefined;
}

/** This module, as a `DirectTarget.runner`: built JavaScript, also when the backend runs from sources. */
const RUNNER = workerEntry("./pytorch-direct.js", import.meta.url).href;

/** The backend's direct target for `spec`. */
export function torchDirectTarget(spec: TorchDirectSpec): DirectTarget {
  return { runner: RUNNER, spec, instances: spec.instances.length };
}

/** What this thread needs of `@galley/backends-native/torch`'s `torchDirect()`. */
export interface TorchDirectCaller {
  execute(
    id: number,
    inputs: readonly TorchWireInput[],
    options?: { graph?: boolean; resident?: readonly number[]; defer?: boolean },
  ): Promise<TorchExecution>;
}

/** The addon's direct caller, loaded once per thread. */
let caller: Promise<TorchDirectCaller> | undefined;
function torchDirect(): Promise<TorchDirectCaller> {
  // A variable specifier, as the backend's: the server builds and runs without the addon.
  const name = "@galley/backends-native/torch";
  caller ??= (import(name) as Promise<{ torchDirect(): TorchDirectCaller }>).then((addon) => addon.torchDirect());
  return caller;
}

/** A runner of `config`'s batches on the instances `spec` names (the `DirectRunnerModule` export). */
export function createDirectRunner(config: ModelConfig, spec: unknown, hooks: DirectRunnerHooks): DirectRunner {
  const { instances, io, device } = spec as TorchDirectSpec;
  const batches = new TorchBatches(config, io, device, device === undefined ? undefined : cudaGraphPlan(config));
  let next = 0;
  return {
    async run(requests: readonly InferenceRequest[]): Promise<DirectRun> {
      const torch = await torchDirect();
      const instance = instances[next++ % instances.length] as number;
      let transfers: DirectRun["transfers"];
      const result = await batches.run(
        requests,
        async ({ inputs, graph, resident, defer }) => {
          try {
            // Kept outputs (`resident`) come back as this thread's handles; `defer` answers the
            // batch once its GPU work is queued (the same rules as the instance's own batches).
            return await torch.execute(instance, inputs, {
              ...(graph ? { graph: true } : {}),
              ...(resident ? { resident } : {}),
              ...(defer ? { defer: true } : {}),
            });
          } catch (error) {
            if ((error as { code?: string }).code === "TORCH_INSTANCE_CLOSED") throw new DirectRouteGone();
            return { error: (error as Error).message };
          }
        },
        {
          name: `${hooks.name} (direct)`,
          log: hooks.log,
          transfers: (counts) => {
            transfers = counts;
          },
          queued: device !== undefined,
        },
      );
      const gone = result.responses.find((outcome) => outcome instanceof DirectRouteGone);
      if (gone) throw gone;
      return {
        outcomes: result.responses,
        execution: {
          inputNs: Number(result.computeInputNs),
          inferNs: Number(result.computeInferNs),
          outputNs: Number(result.computeOutputNs),
        },
        ...(transfers ? { transfers } : {}),
      };
    },
  };
}

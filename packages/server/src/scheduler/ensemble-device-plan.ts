// Which tensors of an ensemble may stay on a GPU between steps (issue 19): the planner behind
// EnsembleScheduler's device hand-off, a pure function of the steps and where their models run.
import type { ModelEnsembling_Step } from "@galley/proto";
import { type DevicePlacement, takesKept } from "../backend/backend.js";

/** Where a step's model runs when it takes and keeps tensors on a GPU (`BackendModel.deviceTensors`). */
export type StepPlacement = DevicePlacement;

/** The GPU of a tensor kept by a model placed on any GPU whose readers are too (`DevicePlan.keep`). */
export const ANY_DEVICE = -1;

/** The decision for one tensor a step makes. */
export interface DeviceDecision {
  /** The ensemble's name for the tensor. */
  tensor: string;
  /** The step that makes it (its index in `ensemble_scheduling.step`). */
  step: number;
  /** The GPU it stays on between steps; undefined when it goes through host memory. */
  deviceId?: number;
  /** Why, in words (for logs and tests). */
  reason: string;
}

/** A plan: a decision per tensor, and per step the outputs (model names) it may keep on a GPU. */
export interface DevicePlan {
  decisions: DeviceDecision[];
  /** Step index → that model's output name → the GPU its consumers take it on ({@link ANY_DEVICE}: where it is made). */
  keep: Map<number, Map<string, number>>;
}

/**
 * Whether a model placed on one GPU (`at`) reads a tensor kept on another fixed GPU (`made`): the
 * core copies it device to device onto the reader's GPU (`core/gpu-copy.ts`), never through the host.
 */
function copiedAcross(at: StepPlacement, made: StepPlacement): boolean {
  return made.deviceId !== undefined && at.deviceId !== undefined && at.deviceId !== made.deviceId;
}

/**
 * Plan the device hand-off of one request's steps. A tensor made by a live step stays on the GPU
 * only when the step's model runs there (keeps tensors) and every live step that reads it takes
 * tensors of the same kind on the same GPU, or runs on another single GPU (then the core copies it
 * there device to device). A tensor the ensemble returns stays there only when
 * its caller takes it on that GPU (`takenOnDevice`: tensor → GPU; a CUDA region the core then
 * fills device to device, or a BLS call that prefers GPU memory); otherwise the caller gets host
 * bytes. Everything else goes through host memory as before.
 */
export function planDeviceHandoff(
  steps: readonly ModelEnsembling_Step[],
  live: ReadonlySet<number>,
  returned: ReadonlySet<string>,
  placement: (step: number) => StepPlacement | undefined,
  takenOnDevice: ReadonlyMap<string, number> = new Map(),
): DevicePlan {
  const decisions: DeviceDecision[] = [];
  const keep = new Map<number, Map<string, number>>();
  const placements = new Map<number, StepPlacement | undefined>();
  const where = (index: number) => {
    if (!placements.has(index)) placements.set(index, placement(index));
    return placements.get(index);
  };
  const readers = new Map<string, number[]>();
  for (const index of live) {
    for (const tensor of new Set(Object.values(steps[index]?.inputMap ?? {}))) {
      readers.set(tensor, [...(readers.get(tensor) ?? []), index]);
    }
  }
  const name = (index: number) => `step ${index} ('${steps[index]?.modelName ?? ""}')`;
  const gpu = (p: StepPlacement) => (p.deviceId === undefined ? "any GPU" : `GPU ${p.deviceId}`);
  for (const index of [...live].sort((a, b) => a - b)) {
    const step = steps[index];
    if (!step) continue;
    const made = where(index);
    for (const [output, tensor] of Object.entries(step.outputMap)) {
      const decide = (reason: string, deviceId?: number) => {
        decisions.push({ tensor, step: index, ...(deviceId !== undefined ? { deviceId } : {}), reason });
        if (deviceId === undefined) return;
        const outputs = keep.get(index) ?? new Map<string, number>();
        keep.set(index, outputs.set(output, deviceId));
      };
      if (!made) {
        decide(`${name(index)} does not run on a GPU that keeps tensors`);
        continue;
      }
      const region = returned.has(tensor) ? takenOnDevice.get(tensor) : undefined;
      if (returned.has(tensor) && (region === undefined || (made.deviceId !== undefined && region !== made.deviceId))) {
        decide(
          region === undefined
            ? "the ensemble returns it"
            : `the ensemble returns it to a caller that takes it on GPU ${region}, it is made on ${gpu(made)}`,
        );
        continue;
      }
      const consumers = readers.get(tensor) ?? [];
      if (consumers.length === 0 && region === undefined) {
        decide("no step reads it");
        continue;
      }
      const other = consumers.find((c) => {
        const at = where(c);
        return !at || !(takesKept(at, made.kind, made.deviceId) || copiedAcross(at, made));
      });
      if (other !== undefined) {
        const at = where(other);
        decide(
          at
            ? `${name(other)} reads it on ${gpu(at)} (${at.kind}), it is made on ${gpu(made)} (${made.kind})`
            : `${name(other)} reads it on the host`,
        );
        continue;
      }
      // Made on any GPU (a Python model): its readers and its caller must want it on one.
      const wanted = new Set(consumers.flatMap((c) => (where(c)?.deviceId !== undefined ? [where(c)?.deviceId] : [])));
      if (region !== undefined) wanted.add(region);
      if (made.deviceId === undefined && wanted.size > 1) {
        decide(`its readers take it on different GPUs (${[...wanted].join(", ")})`);
        continue;
      }
      const deviceId = made.deviceId ?? [...wanted][0] ?? ANY_DEVICE;
      const at = deviceId === ANY_DEVICE ? "the GPU it is made on" : `GPU ${deviceId}`;
      const across = [
        ...new Set(
          consumers.flatMap((c) => ((where(c)?.deviceId ?? deviceId) !== deviceId ? [where(c)?.deviceId] : [])),
        ),
      ];
      decide(
        region === undefined
          ? across.length > 0
            ? `every reader takes it on a GPU: on ${at}, and copied device to device to GPU ${across.join(", ")}`
            : `every reader takes it on ${at}`
          : `the ensemble returns it to a caller that takes it on GPU ${region}${consumers.length > 0 ? " and every reader takes it there" : ""}`,
        deviceId,
      );
    }
  }
  return { decisions, keep };
}

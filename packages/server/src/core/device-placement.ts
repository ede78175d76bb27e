// Where a request's tensors live for the model that runs it (issue 19): CUDA shared-memory inputs
// left in place for a model that runs on their GPU, copied device to device for a model on another
// GPU (issue 55), tensors kept on a GPU copied to the host for a model on no GPU, outputs the
// consumer takes on the device asked of the backend, and outputs written into CUDA regions device
// to device.
import { type DevicePlacement, takesKept } from "../backend/backend.js";
import { InferenceError } from "../base/errors.js";
import type { InferenceRequest, InferenceResponse } from "../base/inference-request.js";
import { type DeviceTensor, hostTensor, NO_BYTES } from "../base/tensor.js";
import type { GpuCopies } from "./gpu-copy.js";
import type { DeviceLocation, SharedMemoryManager, SharedMemoryRef } from "./shared-memory.js";

/** Client memory in a CUDA region as a device tensor; its host copy (one read, counted) is made once. */
function regionTensor(location: DeviceLocation, read: () => Promise<Uint8Array>): DeviceTensor {
  let host: Promise<Uint8Array> | undefined;
  const copy = location.copyTo;
  return {
    kind: "region",
    deviceId: location.deviceId,
    byteSize: location.byteSize,
    pointer: location.pointer,
    ...(location.ipc ? { ipc: location.ipc } : {}),
    ...(copy ? { copyTo: (pointer: bigint, _room: number, deviceId?: number) => copy(pointer, deviceId) } : {}),
    toHost: () => {
      host ??= read();
      return host;
    },
    release: () => {},
  };
}

/**
 * An ensemble's placement: CUDA-region inputs stay where they are, on any GPU, and outputs asked
 * into CUDA regions may come back on the device; each step's own placement then decides (a step
 * that cannot take a tensor on its GPU gets host bytes, read once).
 */
export const ANY_GPU = "any-gpu";

/** Where a model reads and keeps device tensors: its backend's placement, {@link ANY_GPU}, or nowhere. */
export type Placement = DevicePlacement | typeof ANY_GPU | undefined;

/** Whether a model placed at `placement` takes `device` as it is. */
export function takesOnDevice(placement: Placement, device: DeviceTensor): boolean {
  if (placement === ANY_GPU) return true;
  return placement !== undefined && takesKept(placement, device.kind, device.deviceId);
}

/** Whether a model placed at `placement` reads memory on GPU `deviceId` in place. */
function onGpu(placement: Placement, deviceId: number | undefined): boolean {
  return (
    placement !== undefined &&
    deviceId !== undefined &&
    (placement === ANY_GPU || placement.deviceId === undefined || placement.deviceId === deviceId)
  );
}

/** The GPU a model placed at `placement` reads other GPUs' tensors on, by a copy: its one GPU, if it has one. */
function copyTarget(placement: Placement): number | undefined {
  return placement !== undefined && placement !== ANY_GPU ? placement.deviceId : undefined;
}

/**
 * Bring each input where the model reads it: a shared-memory input is read into host memory,
 * except a CUDA region on the GPU of a model that takes device tensors (left in place, held
 * until `holds` run); an input on another GPU than the model's one GPU (a CUDA region, a tensor
 * kept there) is copied there device to device when `gpus` is given (freed when `holds` run); any
 * other input on a GPU is copied to the host unless the model takes it there. Throws the region
 * errors a read throws.
 */
export async function placeInputs(
  request: InferenceRequest,
  shm: SharedMemoryManager,
  model: string,
  placement: Placement,
  holds: (() => void)[],
  gpus?: GpuCopies,
): Promise<void> {
  const target = copyTarget(placement);
  // The tensor on the model's GPU, copied from the GPU it is on; undefined where it cannot be.
  const moved = async (device: DeviceTensor) => {
    if (!gpus || target === undefined || device.deviceId === target) return undefined;
    const copy = await gpus.move(device, target, model);
    if (copy) holds.push(copy.release);
    return copy?.tensor;
  };
  for (const [i, input] of request.inputs.entries()) {
    const ref = input.sharedMemory;
    if (ref) {
      if (placement && input.datatype !== "BYTES") {
        const held = shm.holdDevice(ref);
        if (held && onGpu(placement, held.location.deviceId)) {
          holds.push(held.release);
          const device = regionTensor(held.location, () => shm.read(ref, model));
          request.inputs[i] = { ...input, data: NO_BYTES, movable: false, sharedMemory: undefined, device };
          continue;
        }
        if (held) {
          try {
            const device = await moved(regionTensor(held.location, () => shm.read(ref, model)));
            if (device) {
              request.inputs[i] = { ...input, data: NO_BYTES, movable: false, sharedMemory: undefined, device };
              continue;
            }
          } finally {
            held.release();
          }
        }
      }
      const data = await shm.read(ref, model);
      request.inputs[i] = { ...input, data, movable: true, sharedMemory: undefined };
    } else if (input.device && !takesOnDevice(placement, input.device)) {
      // The owner (an ensemble) releases the device copy; this request only reads it (or its copy).
      const device = input.datatype !== "BYTES" ? await moved(input.device) : undefined;
      request.inputs[i] = device ? { ...input, device } : await hostTensor(input);
    }
  }
}

/** An output's place in a region, as the request asked for it. */
function outputRef(parameters: InferenceRequest["outputs"][number]["parameters"]): SharedMemoryRef | undefined {
  const region = parameters.shared_memory_region;
  if (typeof region !== "string") return undefined;
  return {
    region,
    offset: Number(parameters.shared_memory_offset ?? 0),
    byteSize: Number(parameters.shared_memory_byte_size ?? 0),
  };
}

/**
 * Which outputs the backend may keep on its GPU: those the request's consumer takes there (an
 * ensemble step, already in `deviceOutputs`), those asked into a CUDA region on that GPU, and,
 * for a BLS call that prefers GPU memory there (`outputsOnDevice`), every output it asks for
 * (`modelOutputs` when it names none). Cleared for a model without `placement` (and where a cache
 * or classification reads the bytes).
 */
export function planDeviceOutputs(
  request: InferenceRequest,
  shm: SharedMemoryManager,
  placement: Placement,
  modelOutputs: readonly string[] = [],
): void {
  if (!placement) {
    delete request.deviceOutputs;
    return;
  }
  const outputs = new Map(request.deviceOutputs ?? []);
  const preferred = request.outputsOnDevice;
  if (preferred !== undefined && onGpu(placement, preferred)) {
    const names =
      request.outputs.length > 0
        ? request.outputs.filter((o) => o.parameters.classification === undefined).map((o) => o.name)
        : modelOutputs;
    for (const name of names) if (!outputs.has(name)) outputs.set(name, preferred);
  }
  for (const output of request.outputs) {
    const ref = outputRef(output.parameters);
    if (!ref || output.parameters.classification !== undefined) continue;
    try {
      const location = shm.deviceLocation(ref);
      if (location && onGpu(placement, location.deviceId)) outputs.set(output.name, location.deviceId);
      // A region on another GPU than the model's one GPU: kept there, then copied device to device.
      else if (location && copyTarget(placement) !== undefined)
        outputs.set(output.name, copyTarget(placement) as number);
    } catch {
      // A bad region or range: the write after inference reports it, as for any output.
    }
  }
  if (outputs.size > 0) request.deviceOutputs = outputs;
  else delete request.deviceOutputs;
}

/**
 * Write outputs that asked for shared memory into their regions (a device output into a CUDA
 * region on its GPU: one device-to-device copy; otherwise through the host), leaving them empty in
 * the response; then copy to the host any other device output its consumer does not take on the
 * device. Device outputs are released once written or copied.
 */
export async function finishOutputs(
  request: InferenceRequest,
  response: InferenceResponse,
  shm: SharedMemoryManager,
  model: string,
): Promise<void> {
  for (const [i, output] of response.outputs.entries()) {
    const asked = request.outputs.find((o) => o.name === output.name)?.parameters;
    const ref = asked ? outputRef(asked) : undefined;
    const device = output.device;
    if (!ref) {
      if (device && !request.deviceOutputs?.has(output.name)) {
        response.outputs[i] = await hostTensor(output);
        device.release();
      }
      continue;
    }
    const size = device ? device.byteSize : output.data.byteLength;
    if (ref.byteSize < size) {
      device?.release();
      throw new InferenceError("SHM_OUTPUT_TOO_SMALL", { output: output.name, given: ref.byteSize, needed: size });
    }
    if (device) {
      try {
        const held = device.copyTo ? shm.holdDevice(ref) : undefined;
        if (held && device.copyTo) {
          // The backend counted the kept output; this copy stays on the device (its GPU or the
          // region's, device to device).
          try {
            await device.copyTo(held.location.pointer, ref.byteSize, held.location.deviceId);
          } finally {
            held.release();
          }
        } else {
          held?.release();
          await shm.write(ref, await device.toHost(), model);
        }
      } finally {
        device.release();
      }
    } else {
      await shm.write(ref, output.data, model);
    }
    const { device: _, ...rest } = output;
    response.outputs[i] = { ...rest, data: NO_BYTES, parameters: {}, sharedMemory: ref };
  }
}

import { realpath, stat } from "node:fs/promises";
import { isAbsolute, join, relative, resolve } from "node:path";
import { type ModelConfig, ModelInstanceGroup_Kind } from "@galley/proto";
import type { Logger } from "../../base/log.js";
import type { Backend, BackendModel } from "../backend.js";
import { groupInstances } from "../instance-specs.js";
import { cudaGraphPlan } from "./cuda-graphs.js";
import { mapAotiIO } from "./pytorch-aoti-io.js";
import { torchDirectTarget } from "./pytorch-direct.js";
import { PyTorchInstance, type TorchAddon } from "./pytorch-instance.js";
import { type ForwardSignature, mapTorchIO } from "./pytorch-io.js";
import type { TorchInstanceSettings } from "./pytorch-messages.js";

/** Triton's platform for AOTInductor packages (`model.pt2`), served by the PyTorch backend. */
export const TORCH_AOTI_PLATFORM = "torch_aoti";

/** Options for {@link createPyTorchBackend}. */
export interface PyTorchBackendOptions {
  log: Logger;
  /** The addon's module; by default `@galley/backends-native/torch`, imported at the first load. */
  torch?: () => Promise<TorchSupport>;
}

/** What the backend needs to know about the addon: whether it loads, its GPUs, and its loader. */
export interface TorchSupport extends TorchAddon {
  torchSupport(): {
    available: boolean;
    reason?: string;
    version?: string;
    cudaCompiled?: boolean;
    cudaDevices?: number;
    aoti?: boolean;
  };
}

/** The addon, imported on first use; rejects saying what to install. */
async function importTorchAddon(): Promise<TorchSupport> {
  // A variable specifier: the server builds and runs without the addon package.
  const name = "@galley/backends-native/torch";
  try {
    return (await import(name)) as TorchSupport;
  } catch (error) {
    throw new Error(
      `the PyTorch backend needs the @galley/backends-native package (npm install @galley/backends-native): ${(error as Error).message}`,
    );
  }
}

function torchUnavailable(support: ReturnType<TorchSupport["torchSupport"]>): string {
  return support.reason ?? "libtorch is not available";
}

/** Why torch_aoti packages cannot load with this addon (built against libtorch without AOTInductor). */
function aotiUnavailable(support: ReturnType<TorchSupport["torchSupport"]>): string | undefined {
  if (support.aoti !== false) return undefined;
  return `platform torch_aoti needs a libtorch with AOTInductor (2.x); the torch addon was built against libtorch ${support.version ?? "(unknown)"}: pip install torch (or set LIBTORCH to a libtorch 2.x folder) and rebuild @galley/backends-native`;
}

/**
 * Why the PyTorch backend cannot load models here (no addon package, or no libtorch behind it),
 * in the words a load would fail with; undefined when it can. `galley config validate` asks.
 */
export async function torchMissing(
  torch: () => Promise<TorchSupport> = importTorchAddon,
  platform = "",
): Promise<string | undefined> {
  try {
    const support = (await torch()).torchSupport();
    if (!support.available) return torchUnavailable(support);
    return platform === TORCH_AOTI_PLATFORM ? aotiUnavailable(support) : undefined;
  } catch (error) {
    return (error as Error).message;
  }
}

/**
 * Triton's PyTorch backend on libtorch: `platform: "pytorch_libtorch"` / `backend: "pytorch"`, a
 * TorchScript file (`model.pt` or `default_model_filename`) per version; with `platform:
 * "torch_aoti"`, an AOTInductor package (`model.pt2`). Each instance is the
 * module on a native thread of its own (`@galley/backends-native`'s galley_torch addon), so
 * instances run in parallel without a worker thread in between. The addon is imported only when
 * a model needs it: without it, the server runs and such loads fail saying what to install.
 */
export function createPyTorchBackend(options: PyTorchBackendOptions): Backend {
  let addon: Promise<TorchSupport> | undefined;
  const importAddon = options.torch ?? importTorchAddon;
  return {
    name: "pytorch",

    async load(context) {
      const { config, log } = context;
      const fail = (message: string) => new Error(`unable to load model '${config.name}', ${message}`);
      addon ??= importAddon();
      let torch: TorchSupport;
      try {
        torch = await addon;
      } catch (error) {
        addon = undefined;
        throw fail((error as Error).message);
      }
      const support = torch.torchSupport();
      if (!support.available) throw fail(torchUnavailable(support));
      const aoti = config.platform === TORCH_AOTI_PLATFORM;
      const noAoti = aoti ? aotiUnavailable(support) : undefined;
      if (noAoti) throw fail(noAoti);
      const path = await modelFile(context.modelPath, context.versionPath, config, aoti).catch((error: Error) => {
        throw fail(error.message);
      });
      const parsed = torchParameters(config);
      if (typeof parsed === "string") throw fail(parsed);
      const parameters = aoti ? { ...parsed, format: "aoti" as const } : parsed;
      const gpus = support.cudaDevices ?? 0;
      const graphs = cudaGraphPlan(config);
      for (const note of graphs?.notes ?? []) log.warn(`${config.name}: optimization.cuda: ${note}`);
      const planned: {
        name: string;
        passive: boolean;
        rateLimiter: ModelConfig["instanceGroup"][number]["rateLimiter"];
        settings: TorchInstanceSettings;
      }[] = [];
      // Triton's order (groupInstances): each count, every listed GPU in turn, so the first idle
      // instances the scheduler picks are on different GPUs.
      for (const group of config.instanceGroup) {
        const kind =
          group.kind === ModelInstanceGroup_Kind.AUTO
            ? gpus > 0
              ? ModelInstanceGroup_Kind.GPU
              : ModelInstanceGroup_Kind.CPU
            : group.kind;
        const onGpu = kind === ModelInstanceGroup_Kind.GPU;
        if (onGpu && gpus === 0) {
          throw fail(
            `instance group ${group.name} has kind KIND_GPU but libtorch has no usable GPU (${
              support.cudaCompiled
                ? "CUDA finds no device"
                : "the torch addon was built against a libtorch without CUDA"
            }); use KIND_CPU, or build the addon against a CUDA libtorch on a machine with a GPU`,
          );
        }
        const ids = group.gpus.length > 0 ? group.gpus : Array.from({ length: gpus }, (_, i) => i);
        for (const id of onGpu ? ids : []) {
          if (id < 0 || id >= gpus) throw fail(`instance group ${group.name} names GPU ${id}; libtorch sees ${gpus}`);
        }
        if (!onGpu && graphs)
          log.warn(
            `${config.name}: optimization.cuda.graphs: instance group ${group.name} runs on the CPU, without graphs`,
          );
        for (const spec of groupInstances(group, onGpu ? "GPU" : "CPU", ids)) {
          planned.push({
            name: spec.name,
            passive: spec.passive,
            rateLimiter: spec.rateLimiter,
            settings: onGpu
              ? {
                  ...parameters,
                  device: "cuda",
                  deviceId: spec.device,
                  ...(graphs ? { cudaGraphs: true, cudaGraphLimit: graphs.limit } : {}),
                }
              : { ...parameters, device: "cpu", deviceId: 0 },
          });
        }
      }
      const started = await Promise.allSettled(
        planned.map((p) =>
          PyTorchInstance.start(
            {
              name: p.name,
              config,
              path,
              settings: p.settings,
              torch,
              log,
              rateLimiter: p.rateLimiter,
              signal: context.signal,
              ...(graphs && p.settings.device === "cuda" ? { graphs } : {}),
            },
            (forward) => mapIO(config, forward, (m) => log.warn(m)),
          ),
        ),
      );
      const opened = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
      const failed = started.find((s): s is PromiseRejectedResult => s.status === "rejected");
      if (failed) {
        await Promise.all(opened.map((i) => i.close()));
        throw fail((failed.reason as Error).message);
      }
      // Every instance on one GPU: the core may hand this model tensors on that device (CUDA-region
      // inputs in place, outputs kept for the next model there) — see BackendModel.deviceTensors.
      const devices = new Set(planned.map((p) => (p.settings.device === "cuda" ? p.settings.deviceId : -1)));
      const [only] = devices;
      const deviceTensors =
        devices.size === 1 && only !== undefined && only >= 0
          ? { deviceId: only, kind: "pytorch" as const }
          : undefined;
      const active = opened.filter((_, i) => !planned[i]?.passive);
      const first = active[0];
      return {
        instances: active,
        ...(deviceTensors ? { deviceTensors } : {}),
        // Instances of one model share its config, so its forward and (with one GPU) its device.
        directTarget: () => {
          const ids = active.map((i) => i.directId);
          if (!first || ids.some((id) => id === undefined) || (first.device !== undefined && !deviceTensors))
            return undefined;
          return torchDirectTarget({ instances: ids as number[], io: first.io, device: first.device });
        },
        healthy: () => opened.every((i) => i.healthy),
        unload: async () => {
          await Promise.all(opened.map((i) => i.close()));
        },
      } satisfies BackendModel;
    },
  };
}

/** How the config meets what the model reports: forward's signature, or a package's call spec. */
function mapIO(config: ModelConfig, loaded: ForwardSignature, warn: (message: string) => void) {
  if (loaded.format !== "aoti") return mapTorchIO(config, loaded, warn);
  return mapAotiIO(config, loaded.callSpec ?? [], warn);
}

/**
 * The version's model file: `default_model_filename`, else `model.pt` (`model.pt2` for
 * torch_aoti), which must stay inside the model's folder (after following links).
 */
async function modelFile(modelPath: string, versionPath: string, config: ModelConfig, aoti: boolean): Promise<string> {
  const name = config.defaultModelFilename || (aoti ? "model.pt2" : "model.pt");
  const path = resolve(versionPath, name);
  const inside = (root: string, p: string) => {
    const r = relative(root, p);
    return r !== "" && !r.startsWith("..") && !isAbsolute(r);
  };
  if (!inside(resolve(modelPath), path)) {
    throw new Error(`default_model_filename '${name}' is outside the model's folder`);
  }
  const real = await realpath(path).catch(async () => {
    // A PyTorch-2 model.py is Triton's Python-based runtime's, which the config must ask for.
    const py = !aoti && (await stat(join(versionPath, "model.py")).catch(() => undefined))?.isFile();
    const hint = py
      ? ` (the version folder holds a model.py: set runtime: "model.py" to serve it as a PyTorch-2 model)`
      : "";
    throw new Error(`unable to find '${path}' for model instance '${config.name}'${hint}`);
  });
  if (!inside(await realpath(modelPath), real)) {
    throw new Error(`'${join(String(name))}' leads outside the model's folder`);
  }
  if (!(await stat(real)).isFile()) {
    throw new Error(`'${path}' is not ${aoti ? "an AOTInductor package" : "a TorchScript file"}`);
  }
  return real;
}

/** Triton's PyTorch backend parameters, or what is wrong with one. */
function torchParameters(config: ModelConfig): Omit<TorchInstanceSettings, "device" | "deviceId"> | string {
  const flag = (key: string, fallback: boolean): boolean | string => {
    const value = config.parameters[key]?.stringValue;
    if (value === undefined) return fallback;
    const v = value.trim().toLowerCase();
    if (["true", "1", "yes", "on"].includes(v)) return true;
    if (["false", "0", "no", "off"].includes(v)) return false;
    return `failed to parse parameter '${key}': expected true or false, got '${value}'`;
  };
  const inference = flag("INFERENCE_MODE", true);
  const disableOptimized = flag("DISABLE_OPTIMIZED_EXECUTION", false);
  const cacheCleaning = flag("ENABLE_CACHE_CLEANING", false);
  const disableCudnn = flag("DISABLE_CUDNN", false);
  for (const v of [inference, disableOptimized, cacheCleaning, disableCudnn]) if (typeof v === "string") return v;
  return {
    inferenceMode: inference as boolean,
    optimizedExecution: !(disableOptimized as boolean),
    cacheCleaning: cacheCleaning as boolean,
    cudnn: !(disableCudnn as boolean),
  };
}

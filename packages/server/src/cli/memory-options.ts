import type { ServerOptions } from "../server.js";

/** The longest time limit a timer can hold (2^31 - 1 ms), in whole seconds. */
const MAX_TIMEOUT_SECS = 2_147_483;

const UNITS: Record<string, number> = {
  "": 1,
  B: 1,
  KIB: 2 ** 10,
  MIB: 2 ** 20,
  GIB: 2 ** 30,
  TIB: 2 ** 40,
  KB: 1e3,
  MB: 1e6,
  GB: 1e9,
  TB: 1e12,
};

/** What `galley serve` reads of the memory flags. */
export interface MemoryFlags {
  "load-on-demand"?: string;
  "load-on-demand-wait-secs"?: string;
  "model-memory-budget"?: string[];
  "model-min-residency"?: string;
  "gpu-memory-admission"?: string;
  "gpu-memory-reserve"?: string;
  "gpu-memory-wait-secs"?: string;
}

/** Default of `--gpu-memory-reserve`: room left free on each GPU for what no estimate sees (CUDA contexts, libraries' workspaces, other processes' growth). */
export const DEFAULT_GPU_MEMORY_RESERVE = 512 * 2 ** 20;
/** Default of `--gpu-memory-wait-secs`. */
export const DEFAULT_GPU_MEMORY_WAIT_SECS = 10;

/** `parseArgs` options of the memory flags (`--load-on-demand` alone is rewritten to `=true` first, see {@link bareLoadOnDemand}). */
export const MEMORY_OPTIONS = {
  "load-on-demand": { type: "string" },
  "load-on-demand-wait-secs": { type: "string" },
  "model-memory-budget": { type: "string", multiple: true },
  "model-min-residency": { type: "string" },
  "gpu-memory-admission": { type: "string" },
  "gpu-memory-reserve": { type: "string" },
  "gpu-memory-wait-secs": { type: "string" },
} as const;

/** `--load-on-demand` (and `--gpu-memory-admission`) given without a value means `=true`. */
export function bareLoadOnDemand(args: readonly string[]): string[] {
  return args.map((arg) => (arg === "--load-on-demand" || arg === "--gpu-memory-admission" ? `${arg}=true` : arg));
}

/**
 * The server options of the memory flags: loading on demand (explicit mode only), the memory
 * budget (needs loading on demand), the minimum residency (needs a budget).
 *
 * @throws Error with the flag's name and what it expects.
 */
export function readMemoryFlags(
  v: MemoryFlags,
  controlMode: string,
): Pick<
  ServerOptions,
  "loadOnDemand" | "loadOnDemandWaitSecs" | "modelMemoryBudget" | "modelMinResidencySecs" | "gpuMemoryAdmission"
> {
  const onDemand = flagBool("--load-on-demand", v["load-on-demand"]);
  if (onDemand && controlMode !== "explicit") {
    throw new Error("--load-on-demand can only be used with --model-control-mode=explicit");
  }
  const wait = v["load-on-demand-wait-secs"];
  if (wait !== undefined && !onDemand) throw new Error("--load-on-demand-wait-secs needs --load-on-demand");
  const budgets = v["model-memory-budget"] ?? [];
  if (budgets.length > 0 && !onDemand) {
    throw new Error(
      "--model-memory-budget needs --load-on-demand: an evicted model is loaded again when a request needs it",
    );
  }
  const residency = v["model-min-residency"];
  if (residency !== undefined && budgets.length === 0) {
    throw new Error("--model-min-residency needs --model-memory-budget");
  }
  const budget = budgets.length > 0 ? parseMemoryBudget(budgets) : undefined;
  const admission = readAdmission(v);
  return {
    ...(admission ? { gpuMemoryAdmission: admission } : {}),
    ...(onDemand ? { loadOnDemand: true } : {}),
    ...(wait !== undefined ? { loadOnDemandWaitSecs: integer("--load-on-demand-wait-secs", wait, 1) } : {}),
    ...(budget ? { modelMemoryBudget: budget } : {}),
    ...(residency !== undefined ? { modelMinResidencySecs: integer("--model-min-residency", residency, 0) } : {}),
  };
}

/** `--gpu-memory-admission` and the flags that tune it (each refused without it). */
function readAdmission(v: MemoryFlags): ServerOptions["gpuMemoryAdmission"] {
  const on = flagBool("--gpu-memory-admission", v["gpu-memory-admission"]);
  const reserve = v["gpu-memory-reserve"];
  const wait = v["gpu-memory-wait-secs"];
  if (!on) {
    if (reserve !== undefined) throw new Error("--gpu-memory-reserve needs --gpu-memory-admission");
    if (wait !== undefined) throw new Error("--gpu-memory-wait-secs needs --gpu-memory-admission");
    return undefined;
  }
  return {
    reserveBytes:
      reserve === undefined ? DEFAULT_GPU_MEMORY_RESERVE : byteSize(reserve, reserve, "--gpu-memory-reserve", 0),
    waitSecs: wait === undefined ? DEFAULT_GPU_MEMORY_WAIT_SECS : integer("--gpu-memory-wait-secs", wait, 0),
  };
}

/**
 * `--model-memory-budget` values, each `<kind>:<size>[,<kind>:<size>...]` with kind `host` or
 * `gpu<N>` and size in bytes or with a unit (`512MiB`, `8GiB`, `1.5GB`).
 *
 * @throws Error naming the part that is wrong.
 */
export function parseMemoryBudget(values: readonly string[]): NonNullable<ServerOptions["modelMemoryBudget"]> {
  let host: number | undefined;
  const gpus = new Map<number, number>();
  for (const part of values.flatMap((v) => v.split(","))) {
    const match = /^\s*(host|gpu(\d{1,4}))\s*:\s*(.+?)\s*$/i.exec(part);
    if (!match) {
      throw new Error(
        `invalid value for --model-memory-budget: '${part}' (expected host:<size> or gpu<N>:<size>, e.g. host:8GiB)`,
      );
    }
    const size = byteSize(match[3] ?? "", part, "--model-memory-budget", 1);
    if (match[2] === undefined) {
      if (host !== undefined) throw new Error(`--model-memory-budget gives host twice ('${part}')`);
      host = size;
    } else {
      const gpu = Number(match[2]);
      if (gpus.has(gpu)) throw new Error(`--model-memory-budget gives gpu${gpu} twice ('${part}')`);
      gpus.set(gpu, size);
    }
  }
  return { ...(host !== undefined ? { host } : {}), ...(gpus.size > 0 ? { gpus } : {}) };
}

/** `<n>[unit]` as whole bytes, at least `min`. */
function byteSize(text: string, part: string, flag: string, min: number): number {
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(text.trim());
  const unit = UNITS[(match?.[2] ?? "").toUpperCase()];
  const bytes = match && unit !== undefined ? Math.floor(Number(match[1]) * unit) : Number.NaN;
  if (!Number.isSafeInteger(bytes) || bytes < min) {
    throw new Error(
      `invalid size in ${flag} '${part}' (expected a number of bytes ${min > 0 ? "> 0" : ">= 0"}, or with a unit: KiB, MiB, GiB, TiB, KB, MB, GB, TB)`,
    );
  }
  return bytes;
}

function flagBool(flag: string, value: string | undefined): boolean {
  if (value === undefined) return false;
  const v = value.toLowerCase();
  if (v === "true" || v === "on" || v === "1") return true;
  if (v === "false" || v === "off" || v === "0") return false;
  throw new Error(`invalid value for ${flag}: '${value}' (expected true/on/1 or false/off/0)`);
}

function integer(flag: string, value: string, min: number): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < min || n > MAX_TIMEOUT_SECS) {
    throw new Error(`invalid value for ${flag}: '${value}' (expected an integer in [${min}, ${MAX_TIMEOUT_SECS}])`);
  }
  return n;
}

// Runs on the event loop: an ONNX Runtime session in the server's own isolate, for models whose
// runs are short enough to make there, and `RunCost`, what the instance knows of its runs' times,
// which decides when they are. onnxruntime-node's `run` is a synchronous native call (its promise
// only defers it by one `setImmediate`), so a run here holds the loop for exactly the model's
// time: the instance only runs a batch here when that time is known to be small.
import { createRequire } from "node:module";
import type ort from "onnxruntime-node";
import type { OrtSessionSettings, OrtType, SessionIO, ValueInfo, WireTensor } from "./ort-messages.js";
import { keepOrtTelemetryOff } from "./ort-telemetry.js";

/** A session run synchronously on the calling thread. */
export interface InlineSession {
  readonly io: SessionIO;
  /**
   * Run once; throws onnxruntime's error. Outputs come in the order of `fetches`. `quiet` keeps
   * onnxruntime from logging a failed run (a warm-up on made-up inputs may fail).
   */
  run(feeds: readonly WireTensor[], fetches: readonly string[], quiet?: boolean): WireTensor[];
  release(): void;
}

/** onnxruntime-node's raw binding (`dist/binding.js`): a synchronous session object. */
interface RawSession {
  loadModel(path: string, options: OrtSessionSettings): void;
  readonly inputMetadata: RawMetadata[];
  readonly outputMetadata: RawMetadata[];
  run(feeds: Record<string, ort.Tensor>, fetches: Record<string, null>, options: object): Record<string, ort.Tensor>;
  dispose(): void;
}
interface RawMetadata {
  name: string;
  isTensor: boolean;
  symbolicDimensions: string[];
  shape: number[];
  type: number;
}
interface RawBinding {
  binding: { InferenceSession: new () => RawSession };
  initOrt(): void;
}

/** ONNX's TensorProto element types, as onnxruntime-node's backend names them. */
const RAW_TYPES: (OrtType | undefined)[] = [
  undefined,
  "float32",
  "uint8",
  "int8",
  "uint16",
  "int16",
  "int32",
  "int64",
  "string",
  "bool",
  "float16",
  "float64",
  "uint32",
  "uint64",
];

const require = createRequire(import.meta.url);
const NO_OPTIONS = {};
/** Run options that log only fatal errors. */
const QUIET = { logSeverityLevel: 4 };
let ortModule: typeof ort | undefined;
let raw: RawBinding | null | undefined;

function onnxruntime(): typeof ort {
  if (!ortModule) {
    keepOrtTelemetryOff();
    ortModule = require("onnxruntime-node") as typeof ort;
  }
  return ortModule;
}

/**
 * The raw binding, or null when this onnxruntime-node does not have it where 1.x keeps it (every
 * run then goes to a worker thread). The binding is used rather than the public API because the
 * public `run` defers the same synchronous call by one `setImmediate` and checks its arguments
 * again: about 20 µs of CPU per run on `simple`.
 */
function rawBinding(): RawBinding | null {
  if (raw === undefined) {
    try {
      keepOrtTelemetryOff();
      const loaded = require("onnxruntime-node/dist/binding") as RawBinding;
      raw =
        typeof loaded.binding?.InferenceSession === "function" && typeof loaded.initOrt === "function" ? loaded : null;
    } catch {
      raw = null;
    }
  }
  return raw;
}

/**
 * Load a session in this isolate. Synchronous: the event loop waits for the load (a few
 * milliseconds for the small files this is used for). @throws onnxruntime's error.
 */
export function openInlineSession(path: string, settings: OrtSessionSettings): InlineSession {
  const Tensor = onnxruntime().Tensor;
  const binding = rawBinding();
  if (binding) {
    binding.initOrt();
    const session = new binding.binding.InferenceSession();
    session.loadModel(path, settings);
    const io = { inputs: session.inputMetadata.map(rawInfo), outputs: session.outputMetadata.map(rawInfo) };
    return {
      io,
      run(feeds, fetches, quiet = false) {
        const inputs: Record<string, ort.Tensor> = {};
        for (const t of feeds) inputs[t.name] = new Tensor(t.type, t.data as ort.Tensor.DataType, t.dims);
        const wanted: Record<string, null> = {};
        for (const name of fetches) wanted[name] = null;
        return outputsOf(session.run(inputs, wanted, quiet ? QUIET : NO_OPTIONS), fetches);
      },
      release: () => session.dispose(),
    };
  }
  throw new Error("onnxruntime-node's binding was not found");
}

/** Whether runs can be made on this thread (onnxruntime-node's raw binding is there). */
export function inlineSessionsAvailable(): boolean {
  try {
    onnxruntime();
  } catch {
    return false;
  }
  return rawBinding() !== null;
}

function outputsOf(results: Record<string, ort.Tensor>, fetches: readonly string[]): WireTensor[] {
  const outputs: WireTensor[] = [];
  for (const name of fetches) {
    const tensor = results[name];
    if (!tensor) continue;
    outputs.push({ name, type: tensor.type as OrtType, dims: [...tensor.dims], data: tensor.data as ArrayBufferView });
  }
  return outputs;
}

function rawInfo(m: RawMetadata): ValueInfo {
  if (!m.isTensor) return { name: m.name, shape: [] };
  const type = RAW_TYPES[m.type];
  const shape = m.shape.map((d, i) => (d === -1 ? (m.symbolicDimensions[i] ?? "") : d));
  return type ? { name: m.name, type, shape } : { name: m.name, type: `unsupported(${m.type})`, shape };
}

/**
 * How long a session's runs take, by input size, from the runs it made (on the event loop or in
 * its worker thread, which reports the run's own time): the basis for deciding where the next
 * batch runs. Runs are grouped by the number of input elements, in powers of two; a group's
 * estimate comes from its last {@link WINDOW} runs (see below). A size never seen is estimated
 * from the nearest smaller group, scaled by the ratio of sizes (pessimistic: fixed costs scale
 * too), or else from the nearest larger one (a run does not get slower with fewer elements);
 * with no runs at all there is no estimate.
 *
 * The times are wall-clock, so on a busy machine many runs include time the thread spent
 * preempted, which only ever adds: the estimate is the fastest run of the window, the run's own
 * cost. (On the 2-vCPU VM under load average 6-14, `simple`'s runs inside the HTTP server took
 * 35-61 µs at best, 80-96 µs at the median and 170-190 µs at p90 — caches are cold between
 * requests — against 16-36 µs in a tight loop; a median would flip it to a worker, where the hop
 * costs more than the whole run.) A model whose run time varies with the data more than with the
 * input size is estimated by its fast runs: give it a lower `inline_max_run_us`, or 0.
 */
export class RunCost {
  readonly #groups = new Map<number, number[]>();

  /** Record one run of a batch of `elements` input elements that took `ns`. */
  observe(elements: number, ns: number): void {
    const group = groupOf(elements);
    let runs = this.#groups.get(group);
    if (!runs) {
      runs = [];
      this.#groups.set(group, runs);
    }
    runs.push(ns);
    if (runs.length > WINDOW) runs.shift();
  }

  /** Whether runs of about this size were seen (the estimate is not extrapolated). */
  seen(elements: number): boolean {
    return this.#groups.has(groupOf(elements));
  }

  /** The expected time of a run of `elements` input elements in ns, or undefined when unknown. */
  estimate(elements: number): number | undefined {
    const group = groupOf(elements);
    const own = this.#groups.get(group);
    if (own) return fastest(own);
    let below: number | undefined;
    let above: number | undefined;
    for (const g of this.#groups.keys()) {
      if (g < group && (below === undefined || g > below)) below = g;
      if (g > group && (above === undefined || g < above)) above = g;
    }
    if (below !== undefined) return fastest(this.#groups.get(below) ?? []) * 2 ** (group - below);
    if (above !== undefined) return fastest(this.#groups.get(above) ?? []);
    return undefined;
  }
}

/** Runs kept per size group. */
export const WINDOW = 16;

function groupOf(elements: number): number {
  return elements <= 1 ? 0 : Math.ceil(Math.log2(elements));
}

function fastest(values: readonly number[]): number {
  return values.length === 0 ? 0 : Math.min(...values);
}

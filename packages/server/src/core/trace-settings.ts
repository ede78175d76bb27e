import type { Context } from "@opentelemetry/api";
import { InferenceError } from "../base/errors.js";
import {
  FileTrace,
  TRACE_TENSORS,
  TRACE_TIMESTAMPS,
  type Trace,
  type TraceHeader,
  type TraceSink,
} from "../base/trace.js";
import { DEFAULT_OPENTELEMETRY_CONFIG, type OpenTelemetryConfig } from "./opentelemetry-config.js";
import type { SpanExport } from "./span-export.js";
import { SpanTrace } from "./span-trace.js";
import type { TraceFiles } from "./trace-files.js";

/** The startup trace configuration (`--trace-config`), Triton's defaults unless given. */
export interface TraceConfig {
  /** Bits of {@link TRACE_TIMESTAMPS} and {@link TRACE_TENSORS}; 0 is OFF (default). */
  level: number;
  /** Every `rate`-th request is traced (default 1000). */
  rate: number;
  /** How many more traces to take; -1 (default) is no limit. */
  count: number;
  /** Write `<file>.<n>` every this many traces; 0 (default) appends to `<file>`. */
  logFrequency: number;
  /** Where traces go; tracing is off without one (default ""). */
  file: string;
  /** Other `--trace-config <mode>,<setting>=<value>` entries of the mode, reported by the settings API. */
  extra?: readonly (readonly [string, string])[];
  /**
   * `triton` (default): traces go to `file` as Triton's JSON; `opentelemetry`: they are exported
   * as spans as {@link TraceConfig.opentelemetry} says (no file needed).
   */
  mode?: TraceMode;
  /** Where and how spans are exported in mode `opentelemetry` (Triton's defaults when absent). */
  opentelemetry?: OpenTelemetryConfig;
}

/**
 * Where every setting's traces go: the trace files (mode `triton`), or the span exporter (mode
 * `opentelemetry`; none until {@link TraceSettings.exportSpans} gives it, and nothing is traced meanwhile).
 */
interface TraceOutputs {
  readonly files: TraceFiles;
  readonly maxHeldBytes: number;
  readonly mode: TraceMode;
  spans?: SpanExport;
}

/** The trace APIs used: Triton's trace file, or OpenTelemetry spans. */
export type TraceMode = "triton" | "opentelemetry";

export const DEFAULT_TRACE_CONFIG: TraceConfig = { level: 0, rate: 1000, count: -1, logFrequency: 0, file: "" };

/** One change of the trace-setting API: a value sets a field, `null` clears it, absent leaves it. */
export interface TraceUpdate {
  level?: number | null;
  rate?: number | null;
  count?: number | null;
  logFrequency?: number | null;
}

/** What the trace-setting API reports: `trace_level` is a list, every other value a string. */
export type TraceSettingsReport = Record<string, string | string[]>;

/**
 * The most bytes of finished traces a setting holds before writing them, whatever its
 * `log_frequency` or `count` (both can be set to billions through the API): past it the traces
 * held go to their file at once — `<file>.<n>` with fewer than `log_frequency` traces, or `<file>`.
 */
export const MAX_HELD_TRACE_BYTES = 64 * 1024 * 1024;

type Field = "level" | "rate" | "count" | "logFrequency";
const FIELDS: readonly Field[] = ["level", "rate", "count", "logFrequency"];
type Values = Record<Field, number> & { file: string };

/**
 * One setting object (Triton's `TraceSetting`): its values, which of them were given through the
 * API (the others follow the fallback), its sampling counter and the traces it collected.
 */
class TraceSetting implements TraceSink {
  /** Requests counted for sampling; with `rate` N the N-th, 2N-th, ... are traced. */
  #seen = 0;
  #collected = 0;
  #inFlight = 0;
  #buffer: string[] = [];
  #bufferedBytes = 0;
  #retired = false;

  constructor(
    readonly values: Values,
    readonly specified: ReadonlySet<Field>,
    readonly outputs: TraceOutputs,
  ) {}

  /** Why this setting traces nothing, or undefined when it traces. */
  get invalidReason(): string | undefined {
    const v = this.values;
    if (v.level === 0) return "tracing is disabled";
    if (v.rate === 0) return "sample rate must be non-zero";
    if (v.file === "" && this.outputs.mode === "triton") return "trace file name is not given";
    if (v.count === 0) return "";
    return undefined;
  }

  /** Whether a request that carries a caller's trace context is traced (mode `opentelemetry`, any rate or count). */
  get followsCallers(): boolean {
    return this.outputs.spans !== undefined && this.values.level !== 0;
  }

  /**
   * A trace when this request is sampled: every `rate`-th while `count` lasts, and (mode
   * `opentelemetry`, as Triton) every request with a valid caller's context, whatever the rate
   * and count (which it is still counted against). Rate 0 then traces only those.
   */
  sample(caller?: Context): Trace | undefined {
    const { rate, level } = this.values;
    let hit = false;
    if (caller === undefined || rate !== 0) {
      if (caller === undefined && this.invalidReason !== undefined) return undefined;
      hit = ++this.#seen % rate === 0 && this.values.count !== 0;
      if (hit && this.values.count > 0) this.values.count--;
    }
    if (!hit && caller === undefined) return undefined;
    if (this.outputs.mode === "opentelemetry") {
      const spans = this.outputs.spans;
      return spans ? SpanTrace.root(spans.tracer, level, caller) : undefined;
    }
    this.#inFlight++;
    return FileTrace.root(this, level);
  }

  collect(text: string): void {
    this.#inFlight--;
    this.#collected++;
    const { logFrequency, count, file } = this.values;
    if (text === "") {
      this.#settle();
      return;
    }
    // Unlimited traces into the one array: written as they finish, not held until shutdown.
    if (logFrequency === 0 && count < 0 && !this.#retired) {
      this.outputs.files.append(file, text);
      return;
    }
    this.#buffer.push(text);
    this.#bufferedBytes += text.length;
    if (this.#bufferedBytes > this.outputs.maxHeldBytes) this.flush();
    // Triton's rule: a count that ran out flushes when every request counted was collected
    // (which only happens at rate 1; otherwise the rest is written when the setting goes).
    else if (
      (logFrequency !== 0 && this.#buffer.length >= logFrequency) ||
      (count === 0 && this.#collected === this.#seen)
    )
      this.#flushIndexed();
    this.#settle();
  }

  /** Retired, and everything it held is written. */
  get gone(): boolean {
    return this.#retired && this.#inFlight === 0;
  }

  /** The setting was replaced: what it holds is written once its traces in flight end. */
  retire(): void {
    this.#retired = true;
    this.#settle();
  }

  /** The server stops: write what is held. */
  flush(): void {
    if (this.#buffer.length === 0) return;
    if (this.values.logFrequency !== 0) this.#flushIndexed();
    else {
      this.outputs.files.append(this.values.file, this.#buffer.join(","));
      this.#buffer = [];
      this.#bufferedBytes = 0;
    }
  }

  #settle(): void {
    if (this.#retired && this.#inFlight === 0) this.flush();
  }

  #flushIndexed(): void {
    if (this.#buffer.length === 0) return;
    this.outputs.files.writeIndexed(this.values.file, this.#buffer);
    this.#buffer = [];
    this.#bufferedBytes = 0;
  }
}

/**
 * Triton's trace manager, mode `triton`: the global setting and per-model overrides, sampling at
 * the frontends, and the settings API's update rules — a field given through the API is kept
 * until cleared (`null`); a cleared or never-given field follows the global setting (for a
 * model) or the startup configuration (for the global one); every update makes a new setting,
 * so sampling counts again from zero; a global update re-derives every model override.
 */
export class TraceSettings {
  readonly #startup: Values;
  readonly #extra: readonly (readonly [string, string])[];
  #global: TraceSetting;
  readonly #models = new Map<string, TraceSetting>();
  readonly #retired = new Set<TraceSetting>();
  /** Some setting may trace: the frontends' one check per request when tracing is off. */
  #enabled = false;
  /** Some setting traces requests that carry a caller's context (mode `opentelemetry`). */
  #followsCallers = false;

  readonly #outputs: TraceOutputs;

  /**
   * `maxHeldBytes`: see {@link MAX_HELD_TRACE_BYTES} (tests set less). In mode `opentelemetry`
   * nothing is traced until {@link exportSpans} gives the exporter.
   */
  constructor(config: TraceConfig, files: TraceFiles, maxHeldBytes = MAX_HELD_TRACE_BYTES) {
    this.#outputs = { files, maxHeldBytes, mode: config.mode ?? "triton" };
    this.#startup = {
      level: config.level,
      rate: config.rate,
      count: config.count,
      logFrequency: config.logFrequency,
      file: config.file,
    };
    this.#extra = config.extra ?? (config.mode === "opentelemetry" ? openTelemetryEntries(config.opentelemetry) : []);
    this.#global = new TraceSetting({ ...this.#startup }, new Set(), this.#outputs);
    this.#refresh();
  }

  /** The trace mode, from the startup configuration. */
  get mode(): TraceMode {
    return this.#outputs.mode;
  }

  /**
   * Mode `opentelemetry`: from now on sampled requests are exported as spans by `spans` (the
   * server loads the OpenTelemetry SDK, and makes it, only when the mode is used).
   */
  exportSpans(spans: SpanExport): void {
    this.#outputs.spans = spans;
    this.#refresh();
  }

  /** Whether any setting (global or a model's) traces requests now. */
  get enabled(): boolean {
    return this.#enabled;
  }

  /**
   * A trace for a request to `model` when its setting samples this one, else undefined. `header`
   * reads the caller's W3C `traceparent`/`tracestate` (mode `opentelemetry`): the request's spans
   * are then children of the caller's, and it is traced whatever the rate.
   */
  sample(model: string, header?: TraceHeader): Trace | undefined {
    if (!this.#enabled) return undefined;
    const setting = this.#models.get(model) ?? this.#global;
    const caller =
      this.#followsCallers && header && setting.followsCallers ? this.#outputs.spans?.extract(header) : undefined;
    return setting.sample(caller);
  }

  /** The settings in force for `model` (its override, or the global setting), or the global ones. */
  report(model = ""): TraceSettingsReport {
    const v = ((model !== "" ? this.#models.get(model) : undefined) ?? this.#global).values;
    const level: string[] = [];
    if (v.level & TRACE_TIMESTAMPS) level.push("TIMESTAMPS");
    if (v.level & TRACE_TENSORS) level.push("TENSORS");
    const report: TraceSettingsReport = {
      trace_level: level.length === 0 ? ["OFF"] : level,
      trace_rate: String(v.rate),
      trace_count: String(v.count),
      ...(this.#outputs.mode === "opentelemetry" ? {} : { log_frequency: String(v.logFrequency), trace_file: v.file }),
      trace_mode: this.#outputs.mode,
    };
    for (const [key, value] of this.#extra) report[key] = value;
    return report;
  }

  /**
   * Apply a change to `model`'s setting ("" for the global one) and return what is then in force.
   * @throws {@link InferenceError} TRACE_SETTING_INVALID when the result could not trace and is
   * not OFF (Triton's rule; after a global change, an override that became invalid reports it).
   */
  update(model: string, change: TraceUpdate): TraceSettingsReport {
    if (model === "") {
      this.#replaceGlobal(this.#derive(this.#global, this.#startup, change));
      let failure: unknown;
      for (const [name, setting] of this.#models) {
        try {
          this.#replaceModel(name, this.#derive(setting, this.#global.values, {}));
        } catch (error) {
          failure ??= error;
        }
      }
      this.#refresh();
      if (failure) throw failure;
    } else {
      const current = this.#models.get(model);
      this.#replaceModel(model, this.#derive(current, this.#global.values, change));
      this.#refresh();
    }
    return this.report(model);
  }

  /**
   * Write every trace held and close the files; in mode `opentelemetry`, export the spans queued,
   * waiting at most `exportTimeoutMs` (the rest are dropped and logged).
   */
  async close(exportTimeoutMs = 5000): Promise<void> {
    this.#global.flush();
    for (const setting of this.#models.values()) setting.flush();
    for (const setting of this.#retired) setting.flush();
    this.#enabled = false;
    this.#followsCallers = false;
    await Promise.all([this.#outputs.files.close(), this.#outputs.spans?.close(exportTimeoutMs)]);
  }

  #derive(current: TraceSetting | undefined, fallback: Values, change: TraceUpdate): TraceSetting {
    const values: Values = { ...fallback, file: fallback.file };
    const specified = new Set<Field>();
    for (const field of FIELDS) {
      const given = change[field];
      if (given === null) continue;
      if (given !== undefined) {
        values[field] = given;
        specified.add(field);
      } else if (current?.specified.has(field)) {
        values[field] = current.values[field];
        specified.add(field);
      }
    }
    const setting = new TraceSetting(values, specified, this.#outputs);
    const reason = setting.invalidReason;
    if (reason !== undefined && values.level !== 0) throw new InferenceError("TRACE_SETTING_INVALID", { reason });
    return setting;
  }

  #replaceGlobal(next: TraceSetting): void {
    this.#retire(this.#global);
    this.#global = next;
  }

  #replaceModel(model: string, next: TraceSetting): void {
    const old = this.#models.get(model);
    if (old) this.#retire(old);
    if (next.specified.size === 0) this.#models.delete(model);
    else this.#models.set(model, next);
  }

  #retire(setting: TraceSetting): void {
    setting.retire();
    for (const old of this.#retired) if (old.gone) this.#retired.delete(old);
    if (!setting.gone) this.#retired.add(setting);
  }

  #refresh(): void {
    let follows = this.#global.followsCallers;
    for (const setting of this.#models.values()) follows ||= setting.followsCallers;
    let enabled = follows || this.#global.invalidReason === undefined;
    for (const setting of this.#models.values()) enabled ||= setting.invalidReason === undefined;
    // Mode opentelemetry traces nothing before its exporter is there.
    this.#enabled = enabled && (this.#outputs.mode === "triton" || this.#outputs.spans !== undefined);
    this.#followsCallers = follows;
  }
}

/** Mode opentelemetry's settings as `--trace-config opentelemetry,<setting>=<value>` would give them (for the settings API). */
function openTelemetryEntries(config: OpenTelemetryConfig = DEFAULT_OPENTELEMETRY_CONFIG): [string, string][] {
  return [
    ["url", config.url],
    ...config.resource.map(([key, value]): [string, string] => ["resource", `${key}=${value}`]),
    ["bsp_max_queue_size", String(config.bspMaxQueueSize)],
    ["bsp_schedule_delay", String(config.bspScheduleDelay)],
    ["bsp_max_export_batch_size", String(config.bspMaxExportBatchSize)],
  ];
}

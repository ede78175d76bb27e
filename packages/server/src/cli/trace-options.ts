import { TRACE_TENSORS, TRACE_TIMESTAMPS } from "../base/trace.js";
import { DEFAULT_OPENTELEMETRY_CONFIG, type OpenTelemetryConfig, otlpUrl } from "../core/opentelemetry-config.js";
import type { TraceConfig } from "../core/trace-settings.js";

/** The deprecated `--trace-*` flags, as given. */
export interface DeprecatedTraceFlags {
  file?: string | undefined;
  level?: readonly string[] | undefined;
  rate?: string | undefined;
  count?: string | undefined;
  logFrequency?: string | undefined;
}

const LEVELS: Record<string, number> = {
  off: 0,
  false: 0,
  timestamps: TRACE_TIMESTAMPS,
  true: TRACE_TIMESTAMPS,
  on: TRACE_TIMESTAMPS,
  min: TRACE_TIMESTAMPS,
  max: TRACE_TIMESTAMPS,
  tensors: TRACE_TENSORS,
};

/**
 * `--trace-config [<mode>,]<setting>=<value>` (repeatable) and the deprecated `--trace-file`,
 * `--trace-level`, `--trace-rate`, `--trace-count`, `--trace-log-frequency`, as tritonserver reads
 * them: levels combine; `--trace-config` wins over a deprecated flag (with Triton's warning);
 * `mode=opentelemetry` exports spans as the `opentelemetry,<setting>=<value>` entries say (`url`,
 * `resource=<key>=<value>` repeatable, `bsp_max_queue_size`, `bsp_schedule_delay`,
 * `bsp_max_export_batch_size`, the last three defaulting to the `OTEL_BSP_*` variables of `env`);
 * the entries of the mode in use (other than `file` and `log-frequency`) are reported by the
 * settings API, the other mode's are ignored.
 * @throws Error with tritonserver's text for a malformed option.
 */
export function parseTraceConfig(
  specs: readonly string[],
  deprecated: DeprecatedTraceFlags,
  env: Readonly<Record<string, string | undefined>> = process.env,
): { config: Partial<TraceConfig>; warnings: string[] } {
  const warnings: string[] = [];
  let level: number | undefined;
  let rate: number | undefined;
  let count: number | undefined;
  let logFrequency: number | undefined;
  let file: string | undefined;
  const extra: [string, string][] = [];
  const otel: [string, string][] = [];
  let mode: "triton" | "opentelemetry" = "triton";
  for (const spec of specs) {
    if (spec.startsWith(","))
      throw new Error(
        `No trace mode specified. --trace-config option format is <trace mode>,<setting>=<value> or <setting>=<value>. Got ${spec}`,
      );
    const comma = spec.indexOf(",");
    const equals = spec.indexOf("=");
    const hasMode = comma !== -1 && (equals === -1 || comma < equals);
    const specMode = hasMode ? spec.slice(0, comma).toLowerCase() : "";
    const rest = hasMode ? spec.slice(comma + 1) : spec;
    const at = rest.indexOf("=");
    const setting = at === -1 ? "" : rest.slice(0, at);
    const value = at === -1 ? "" : rest.slice(at + 1);
    if (setting === "" || value === "")
      throw new Error(`--trace-config option format is '<trace mode>,<setting>=<value>'. Got ${spec}`);
    const option = `--trace-config ${hasMode ? `${specMode},` : ""}${setting}`;
    if (hasMode && specMode !== "triton" && specMode !== "opentelemetry")
      throw new Error(
        `invalid value for trace mode option: ${specMode}. Available options are "triton" and "opentelemetry"`,
      );
    if (specMode === "opentelemetry") {
      otel.push([setting, value]);
      continue;
    }
    if (specMode === "triton") {
      if (setting === "file") file = value;
      else if (setting === "log-frequency") logFrequency = integer(option, value, 0, 4294967295);
      else extra.push([setting, value]);
      continue;
    }
    switch (setting) {
      case "level": {
        const bits = LEVELS[value.toLowerCase()];
        if (bits === undefined) throw new Error(`invalid value for trace level option: ${value}`);
        level = (level ?? 0) | bits;
        break;
      }
      case "rate":
        rate = integer(option, value, 0, 4294967295);
        break;
      case "count":
        count = integer(option, value, -1, 2147483647);
        break;
      case "mode": {
        const chosen = value.toLowerCase();
        if (chosen !== "triton" && chosen !== "opentelemetry")
          throw new Error(
            `Bad option: "${option}".\ninvalid value for trace mode option: ${chosen}. Available options are "triton" and "opentelemetry"`,
          );
        mode = chosen;
        break;
      }
      default:
        throw new Error(`Bad option: "${option}".\nunknown trace setting '${setting}'`);
    }
  }
  const old = (flag: string, setting: string, given: unknown, current: unknown) => {
    if (given === undefined) return false;
    warnings.push(
      `Warning: '--trace-${flag}' has been deprecated and will be removed in future releases. Please use '--trace-config ${setting}=<value>' instead.`,
    );
    if (current === undefined) return true;
    warnings.push(`Overriding deprecated '--trace-${flag}' in favor of provided ${setting} value in --trace-config!`);
    return false;
  };
  if (mode !== "opentelemetry" && old("file", "triton,file", deprecated.file, file)) file = deprecated.file;
  if (old("level", "level", deprecated.level, level)) {
    let bits = 0;
    for (const text of deprecated.level ?? []) {
      const value = LEVELS[text.toLowerCase()];
      if (value === undefined) throw new Error(`invalid value for trace level option: ${text}`);
      bits = value === 0 ? 0 : bits | value;
    }
    level = bits;
  }
  if (old("rate", "rate", deprecated.rate, rate)) rate = integer("--trace-rate", deprecated.rate ?? "", 0, 4294967295);
  if (old("count", "count", deprecated.count, count))
    count = integer("--trace-count", deprecated.count ?? "", -1, 2147483647);
  if (mode === "opentelemetry") return openTelemetry(otel, deprecated, env, level, rate, count, warnings);
  if (old("log-frequency", "triton,log-frequency", deprecated.logFrequency, logFrequency))
    logFrequency = integer("--trace-log-frequency", deprecated.logFrequency ?? "", 0, 4294967295);
  const config: Partial<TraceConfig> = {};
  if (level !== undefined) config.level = level;
  if (rate !== undefined) config.rate = rate;
  if (count !== undefined) config.count = count;
  if (logFrequency !== undefined) config.logFrequency = logFrequency;
  if (file !== undefined) config.file = file;
  if (extra.length > 0) config.extra = extra;
  return { config, warnings };
}

function integer(option: string, text: string, min: number, max: number): number {
  if (!/^-?[0-9]+$/.test(text) || Number(text) < min || Number(text) > max)
    throw new Error(`Bad option: "${option}".\nexpected an integer in [${min}, ${max}], got '${text}'`);
  return Number(text);
}

/** The configuration of mode `opentelemetry`: the global settings, the exporter's, Triton's warnings. */
function openTelemetry(
  entries: readonly (readonly [string, string])[],
  deprecated: DeprecatedTraceFlags,
  env: Readonly<Record<string, string | undefined>>,
  level: number | undefined,
  rate: number | undefined,
  count: number | undefined,
  warnings: string[],
): { config: Partial<TraceConfig>; warnings: string[] } {
  if (deprecated.file !== undefined)
    warnings.push("Warning: '--trace-file' is deprecated and will be ignored with opentelemetry tracing mode. ");
  if (deprecated.logFrequency !== undefined)
    warnings.push(
      "Warning: '--trace-log-frequency' is deprecated and will be ignored with opentelemetry tracing mode.",
    );
  const exporter: OpenTelemetryConfig = { ...DEFAULT_OPENTELEMETRY_CONFIG, resource: [] };
  const resource: [string, string][] = [];
  const given = new Set<string>();
  const extra: [string, string][] = [];
  for (const [setting, value] of entries) {
    const option = `--trace-config opentelemetry,${setting}`;
    if (setting === "url") {
      try {
        otlpUrl(value);
      } catch (error) {
        throw new Error(`Bad option: "${option}".\n${(error as Error).message}`);
      }
      exporter.url = value;
    } else if (setting === "resource") {
      const at = value.indexOf("=");
      if (at <= 0) throw new Error(`Bad option: "${option}".\nexpected <key>=<value>, got '${value}'`);
      resource.push([value.slice(0, at), value.slice(at + 1)]);
    } else if (setting in BSP) {
      const field = BSP[setting as keyof typeof BSP];
      exporter[field] = uint32(option, value);
      given.add(setting);
    }
    if (setting !== "file" && setting !== "log-frequency") extra.push([setting, value]);
  }
  for (const [setting, field] of Object.entries(BSP)) {
    if (given.has(setting)) continue;
    const variable = `OTEL_${setting.toUpperCase()}`;
    const text = env[variable];
    if (text !== undefined && text !== "") exporter[field] = uint32(variable, text);
    extra.push([setting, String(exporter[field])]);
  }
  exporter.resource = resource;
  if (level !== undefined && level & TRACE_TENSORS)
    warnings.push("Tensor level tracing is not supported by the mode: opentelemetry");
  const config: Partial<TraceConfig> = { mode: "opentelemetry", opentelemetry: exporter, extra };
  if (level !== undefined) config.level = level;
  if (rate !== undefined) config.rate = rate;
  if (count !== undefined) config.count = count;
  return { config, warnings };
}

/** The batch span processor's settings and their {@link OpenTelemetryConfig} fields. */
const BSP = {
  bsp_max_queue_size: "bspMaxQueueSize",
  bsp_schedule_delay: "bspScheduleDelay",
  bsp_max_export_batch_size: "bspMaxExportBatchSize",
} as const;

/** An unsigned 32-bit value, with tritonserver's texts (`option`: the flag, or the environment variable). */
function uint32(option: string, text: string): number {
  if (!/^[0-9]+$/.test(text)) throw new Error(`Bad option: "${option}".\nInvalid option value. Got ${text}`);
  if (Number(text) > 4294967295)
    throw new Error(`Bad option: "${option}".\nProvided option value is out of bound. Got ${text}`);
  return Number(text);
}

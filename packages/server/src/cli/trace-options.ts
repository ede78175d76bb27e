import { TRACE_TENSORS, TRACE_TIMESTAMPS } from "../base/trace.js";
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
 * `triton,<other>=<value>` entries are kept and reported by the settings API. Only mode `triton`
 * is served: `opentelemetry` needs an exporter this server does not have.
 * @throws Error with tritonserver's text for a malformed option.
 */
export function parseTraceConfig(
  specs: readonly string[],
  deprecated: DeprecatedTraceFlags,
): { config: Partial<TraceConfig>; warnings: string[] } {
  const warnings: string[] = [];
  let level: number | undefined;
  let rate: number | undefined;
  let count: number | undefined;
  let logFrequency: number | undefined;
  let file: string | undefined;
  const extra: [string, string][] = [];
  for (const spec of specs) {
    if (spec.startsWith(","))
      throw new Error(
        `No trace mode specified. --trace-config option format is <trace mode>,<setting>=<value> or <setting>=<value>. Got ${spec}`,
      );
    const comma = spec.indexOf(",");
    const equals = spec.indexOf("=");
    const hasMode = comma !== -1 && (equals === -1 || comma < equals);
    const mode = hasMode ? spec.slice(0, comma).toLowerCase() : "";
    const rest = hasMode ? spec.slice(comma + 1) : spec;
    const at = rest.indexOf("=");
    const setting = at === -1 ? "" : rest.slice(0, at);
    const value = at === -1 ? "" : rest.slice(at + 1);
    if (setting === "" || value === "")
      throw new Error(`--trace-config option format is '<trace mode>,<setting>=<value>'. Got ${spec}`);
    const option = `--trace-config ${hasMode ? `${mode},` : ""}${setting}`;
    if (hasMode && mode !== "triton" && mode !== "opentelemetry")
      throw new Error(
        `invalid value for trace mode option: ${mode}. Available options are "triton" and "opentelemetry"`,
      );
    if (mode === "opentelemetry") continue;
    if (mode === "triton") {
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
      case "mode":
        if (value.toLowerCase() === "opentelemetry")
          throw new Error(
            "trace mode 'opentelemetry' is not supported by this server (it has no OpenTelemetry exporter); use 'triton'",
          );
        if (value.toLowerCase() !== "triton")
          throw new Error(
            `invalid value for trace mode option: ${value.toLowerCase()}. Available options are "triton" and "opentelemetry"`,
          );
        break;
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
  if (old("file", "triton,file", deprecated.file, file)) file = deprecated.file;
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

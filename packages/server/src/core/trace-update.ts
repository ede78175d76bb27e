import { InferenceError } from "../base/errors.js";
import { TRACE_TENSORS, TRACE_TIMESTAMPS } from "../base/trace.js";
import type { TraceUpdate } from "./trace-settings.js";

/** The trace-setting API's names of {@link TraceUpdate}'s numeric fields. */
export const TRACE_NUMBERS = { trace_rate: "rate", trace_count: "count", log_frequency: "logFrequency" } as const;

/**
 * `trace_level`'s values as Triton reads them: `TIMESTAMPS` and `TENSORS` combine, `OFF` must
 * stand alone, anything else is ignored; undefined when nothing known was given (the level then
 * stays as it is). @throws {@link InferenceError} BAD_TRACE_SETTING for `OFF` with others.
 */
export function traceLevel(values: readonly string[]): number | undefined {
  let level: number | undefined;
  for (const value of values) {
    if (value === "OFF") {
      if (values.length !== 1)
        throw new InferenceError("BAD_TRACE_SETTING", { message: "Expect only one trace level 'OFF' is specified" });
      level = 0;
    } else if (value === "TIMESTAMPS") level = (level ?? 0) | TRACE_TIMESTAMPS;
    else if (value === "TENSORS") level = (level ?? 0) | TRACE_TENSORS;
  }
  return level;
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;

/**
 * A numeric trace setting read as Triton reads it (`std::stoi`: leading spaces and a sign, then
 * digits; what follows is ignored), then as its type: the rate and log frequency are unsigned 32
 * bits (`"-1"` wraps), the count at least -1. gRPC's count message has a space after `got:`,
 * HTTP's has none. @throws {@link InferenceError} BAD_TRACE_SETTING with Triton's texts.
 */
export function traceNumber(name: keyof typeof TRACE_NUMBERS, text: string, protocol: "http" | "grpc"): number {
  const count = name === "trace_count";
  const range = count ? "[ -1, 2147483647 ]" : "[ 0, 4294967295 ]";
  const digits = /^[ \t\n\v\f\r]*([+-]?[0-9]+)/.exec(text)?.[1];
  if (digits === undefined) throw bad(`Unable to parse '${name}', got: ${text}`);
  const value = Number(digits);
  if (value < INT32_MIN || value > INT32_MAX)
    throw bad(`Unable to parse '${name}', value is out of range ${range}, got: ${text}`);
  if (!count) return value >>> 0;
  if (value < -1)
    throw bad(`Unable to parse 'trace_count'. Expecting value >= -1, got:${protocol === "grpc" ? " " : ""}${text}`);
  return value;
}

function bad(message: string): InferenceError {
  return new InferenceError("BAD_TRACE_SETTING", { message });
}

/** Put a numeric field's value (or `null`, clear) into an update under its {@link TraceUpdate} name. */
export function setTraceNumber(update: TraceUpdate, name: keyof typeof TRACE_NUMBERS, value: number | null): void {
  update[TRACE_NUMBERS[name]] = value;
}

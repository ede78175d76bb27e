/** Severity letters as Triton prints them: I, W, E; verbose lines print as I. */
type Severity = "I" | "W" | "E";

/** A small leveled logger writing Triton-shaped lines to stderr. */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  /** Printed only when `--log-verbose` is at least `level`. */
  verbose(level: number, message: string): void;
}

/** Options for {@link createLogger}. */
export interface LoggerOptions {
  /** `--log-verbose`; 0 prints no verbose lines. */
  verboseLevel?: number;
  /** `--log-format`: `default` (Triton's glog-like prefix) or `ISO8601`. */
  format?: "default" | "ISO8601";
  /** Where lines go; default `process.stderr`. */
  write?: (line: string) => void;
}

/**
 * Create a logger. `default` lines look like Triton's: `I1202 15:42:39.123456 4242 galley] text`.
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const verboseLevel = options.verboseLevel ?? 0;
  const write = options.write ?? ((line: string) => process.stderr.write(line));
  const line = (severity: Severity, message: string) => {
    const now = new Date();
    const prefix =
      options.format === "ISO8601"
        ? `${now.toISOString()} ${severity} ${process.pid} galley]`
        : `${severity}${pad(now.getMonth() + 1)}${pad(now.getDate())} ${pad(now.getHours())}:${pad(now.getMinutes())}:${pad(now.getSeconds())}.${String(now.getMilliseconds() * 1000).padStart(6, "0")} ${process.pid} galley]`;
    write(`${prefix} ${message}\n`);
  };
  return {
    info: (m) => line("I", m),
    warn: (m) => line("W", m),
    error: (m) => line("E", m),
    verbose: (level, m) => {
      if (level <= verboseLevel) line("I", m);
    },
  };
}

function pad(n: number): string {
  return String(n).padStart(2, "0");
}

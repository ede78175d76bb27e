import { openSync, writeSync } from "node:fs";

/** Severity letters as Triton prints them: I, W, E; verbose lines print as I. */
type Severity = "I" | "W" | "E";

/** What the logging extension reads and changes at run time (PROTOCOL.md §1.2 `/v2/logging`). */
export interface LogSettings {
  log_file: string;
  log_info: boolean;
  log_warning: boolean;
  log_error: boolean;
  log_verbose_level: number;
  log_format: "default" | "ISO8601";
}

/** A small leveled logger writing one Triton-shaped line per event to stderr. */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  /** Printed only when the verbose level is at least `level`. */
  verbose(level: number, message: string): void;
  /** The current settings; change them through {@link Logger.update}. */
  readonly settings: Readonly<LogSettings>;
  update(changes: Partial<Omit<LogSettings, "log_file">>): void;
}

/** Options for {@link createLogger}. */
export interface LoggerOptions {
  /** `--log-verbose`; 0 prints no verbose lines. */
  verboseLevel?: number;
  /** `--log-format`: `default` (Triton's glog-like prefix) or `ISO8601`. */
  format?: "default" | "ISO8601";
  /** `--log-info`, `--log-warning`, `--log-error` (all true by default). */
  info?: boolean;
  warning?: boolean;
  error?: boolean;
  /** Where lines go; default `process.stderr`. */
  write?: (line: string) => void;
  /**
   * `--log-file`: append the lines to this file instead (opened now, created if absent; each line
   * is written before the call returns, so nothing is lost on exit). `log_file` reports it.
   * @throws the open's error (`ENOENT`, `EACCES`, ...).
   */
  file?: string;
}

/**
 * Create a logger. `default` lines look like Triton's: `I1202 15:42:39.123456 4242 galley] text`.
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const settings: LogSettings = {
    log_file: options.file ?? "",
    log_info: options.info ?? true,
    log_warning: options.warning ?? true,
    log_error: options.error ?? true,
    log_verbose_level: options.verboseLevel ?? 0,
    log_format: options.format ?? "default",
  };
  const write = options.write ?? (options.file ? appendTo(options.file) : (line: string) => process.stderr.write(line));
  const line = (severity: Severity, message: string) => {
    const now = new Date();
    const micros = String(now.getMilliseconds() * 1000).padStart(6, "0");
    const prefix =
      settings.log_format === "ISO8601"
        ? `${now.toISOString()} ${severity} ${process.pid} galley]`
        : `${severity}${pad(now.getMonth() + 1)}${pad(now.getDate())} ${pad(now.getHours())}:${pad(now.getMinutes())}:${pad(now.getSeconds())}.${micros} ${process.pid} galley]`;
    write(`${prefix} ${message}\n`);
  };
  return {
    info: (m) => settings.log_info && line("I", m),
    warn: (m) => settings.log_warning && line("W", m),
    error: (m) => settings.log_error && line("E", m),
    verbose: (level, m) => {
      if (settings.log_info && level <= settings.log_verbose_level) line("I", m);
    },
    settings,
    update: (changes) => Object.assign(settings, changes),
  };
}

/** A writer that appends each line to `path` synchronously, as Triton's logger flushes each line. */
function appendTo(path: string): (line: string) => void {
  const fd = openSync(path, "a");
  return (line) => {
    writeSync(fd, line);
  };
}

function pad(n: number): string {
  return String(n).padStart(2, "0");
}

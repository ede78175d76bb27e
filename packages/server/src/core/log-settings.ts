import { InferenceError } from "../base/errors.js";
import type { Logger, LogSettings } from "../base/log.js";

/** A value of the logging extension: a bool, an unsigned int or a string. */
export type LogSettingValue = boolean | number | string | bigint | null;

/**
 * Apply logging-extension changes (PROTOCOL.md §1.2 `/v2/logging`) and return the settings now in
 * force. `null` leaves a setting unchanged; a `log_file` is refused (501) and an unknown
 * `log_format` answered as Triton does (503).
 */
export function applyLogSettings(log: Logger, changes: Record<string, LogSettingValue>): LogSettings {
  const update: Partial<LogSettings> = {};
  for (const [key, value] of Object.entries(changes)) {
    if (value === null) continue;
    switch (key) {
      case "log_file":
        if (value !== "") throw new InferenceError("LOG_FILE_UNSUPPORTED");
        break;
      case "log_info":
      case "log_warning":
      case "log_error":
        if (typeof value !== "boolean")
          throw new InferenceError("BAD_LOG_SETTING", { message: `expect boolean for '${key}'` });
        update[key] = value;
        break;
      case "log_verbose_level": {
        const level = Number(value);
        if (typeof value === "boolean" || typeof value === "string" || !Number.isInteger(level) || level < 0) {
          throw new InferenceError("BAD_LOG_SETTING", { message: "expect unsigned integer for 'log_verbose_level'" });
        }
        update.log_verbose_level = level;
        break;
      }
      case "log_format":
        if (value !== "default" && value !== "ISO8601")
          throw new InferenceError("BAD_LOG_FORMAT", { format: String(value) });
        update.log_format = value;
        break;
      default:
        throw new InferenceError("BAD_LOG_SETTING", { message: `log setting '${key}' is not supported` });
    }
  }
  log.update(update);
  return { ...log.settings };
}

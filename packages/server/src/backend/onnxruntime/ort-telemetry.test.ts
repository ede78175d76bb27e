import { describe, expect, it } from "vitest";
import { keepOrtTelemetryOff } from "./ort-telemetry.js";

describe("keepOrtTelemetryOff", () => {
  it("turns telemetry off when the variable is unset or empty", () => {
    for (const env of [{}, { ORT_DISABLE_TELEMETRY: "" }] as NodeJS.ProcessEnv[]) {
      expect(keepOrtTelemetryOff(env)).toBe(false);
      expect(env.ORT_DISABLE_TELEMETRY).toBe("1");
    }
  });

  it("keeps the user's value, and says whether it leaves telemetry on", () => {
    for (const [value, on] of [
      ["0", true],
      ["false", true],
      ["1", false],
      ["TRUE", false],
      ["yes", false],
    ] as const) {
      const env: NodeJS.ProcessEnv = { ORT_DISABLE_TELEMETRY: value };
      expect(keepOrtTelemetryOff(env)).toBe(on);
      expect(env.ORT_DISABLE_TELEMETRY).toBe(value);
    }
  });
});

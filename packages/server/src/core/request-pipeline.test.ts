import { describe, expect, it } from "vitest";
import { InferenceError } from "../base/errors.js";
import { failureReason } from "./request-pipeline.js";

describe("failureReason", () => {
  it("gives Triton's reason for each kind of failure", () => {
    expect(failureReason(new InferenceError("QUEUE_FULL"))).toBe("REJECTED");
    expect(failureReason(new InferenceError("QUEUE_TIMEOUT"))).toBe("REJECTED");
    expect(failureReason(new InferenceError("GPU_MEMORY_SHORT", { device: "0" }))).toBe("REJECTED");
    expect(failureReason(new InferenceError("CANCELLED", { id: "" }))).toBe("CANCELED");
    expect(failureReason(new InferenceError("BACKEND_FAILED", { message: "x" }))).toBe("BACKEND");
    // A model's error that names a Triton code is still the backend's.
    expect(failureReason(new InferenceError("BACKEND_FAILED", { message: "x" }, { code: "INVALID_ARG" }))).toBe(
      "BACKEND",
    );
    expect(failureReason(new InferenceError("UNCLASSIFIED", { message: "x" }))).toBe("OTHER");
  });
});

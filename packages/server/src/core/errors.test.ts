import { describe, expect, it } from "vitest";
import { hiddenCause, InferenceError, toInferenceError } from "./errors.js";

describe("toInferenceError", () => {
  it("keeps an InferenceError as it is", () => {
    const error = new InferenceError("MODEL_NOT_FOUND", { model: "m" });
    expect(toInferenceError(error)).toBe(error);
    expect(hiddenCause(error)).toBeUndefined();
  });

  it("passes on a plain Error's message, written for people (a runtime's, or Galley's)", () => {
    const failure = toInferenceError(new Error("onnx runtime error 2: bad input"));
    expect([failure.id, failure.code, failure.message]).toEqual([
      "BACKEND_FAILED",
      "INTERNAL",
      "onnx runtime error 2: bad input",
    ]);
    expect(hiddenCause(failure)).toBeUndefined();
  });

  it("hides the engine's errors, Node's coded errors and thrown non-errors behind INTERNAL_ERROR", () => {
    let bigint: unknown;
    try {
      BigInt(-2.5);
    } catch (error) {
      bigint = error;
    }
    const thrown = [
      bigint,
      new RangeError("Offset is outside the bounds of the DataView"),
      new SyntaxError("Unexpected token 'o', \"not json\" is not valid JSON"),
      Object.assign(new Error("ENOENT: no such file or directory, open '/secret/path'"), { code: "ENOENT" }),
      "a string",
    ];
    for (const error of thrown) {
      const failure = toInferenceError(error);
      expect(failure.id).toBe("INTERNAL_ERROR");
      expect(failure.httpStatus).toBe(500);
      expect(failure.message).toBe("internal error: the request failed unexpectedly; the server log has the details");
      expect(failure.cause).toBe(error);
      expect(hiddenCause(failure)).toContain(error instanceof Error ? error.message : String(error));
    }
  });
});
